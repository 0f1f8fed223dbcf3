"""A ceiling on judge spend in USD. A call reserves its estimated cost before it is
made and settles to the actual cost after; a call whose estimate would pass the
ceiling (with what is spent and what is in flight) is not made."""

from __future__ import annotations

import threading


class BudgetExceeded(Exception):
    pass


class Budget:
    def __init__(self, ceiling_usd: float | None):
        if ceiling_usd is not None and ceiling_usd < 0:
            raise ValueError("a budget is a non-negative amount of USD")
        self.ceiling = ceiling_usd
        self.spent = 0.0
        self.reserved = 0.0
        self.refused = 0
        self._lock = threading.Lock()

    def reserve(self, estimate: float) -> None:
        if self.ceiling is None:
            return
        with self._lock:
            if self.spent + self.reserved + estimate > self.ceiling:
                self.refused += 1
                raise BudgetExceeded(
                    f"budget of ${self.ceiling:.4f} reached: ${self.spent:.4f} spent, ${self.reserved:.4f} in flight, "
                    f"this call estimated at ${estimate:.4f}; the call was not made"
                )
            self.reserved += estimate

    def settle(self, estimate: float, actual: float) -> None:
        with self._lock:
            if self.ceiling is not None:
                self.reserved = max(0.0, self.reserved - estimate)
            self.spent += actual

    @property
    def remaining(self) -> float | None:
        return None if self.ceiling is None else max(0.0, self.ceiling - self.spent)
