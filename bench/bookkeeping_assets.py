"""Trivial partitioned assets whose runs cost nothing but Dagster's bookkeeping: a
chain of K assets over the `sessions` dynamic partitions, each materializing every
partition of its run at once (as the metric assets do).

`defs` (5 assets) is what tests load into the webserver's GraphQL; asset `a2` fails
when its run covers a partition whose key contains "fail", so a test can make a run
fail on some sessions.
"""

import dagster as dg

JOB = "bookkeeping"
FAIL_MARK = "fail"
SESSIONS = dg.DynamicPartitionsDefinition(name="sessions")


def _asset(i: int, upstream: list[dg.AssetsDefinition], fails: bool) -> dg.AssetsDefinition:
    @dg.asset(name=f"a{i}", partitions_def=SESSIONS, backfill_policy=dg.BackfillPolicy.single_run(), deps=upstream)
    def _compute(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        failing = [k for k in context.partition_keys if FAIL_MARK in k] if fails else []
        if failing:
            raise RuntimeError(f"a{i} fails on {failing}")
        return dg.MaterializeResult(metadata={"partitions": len(context.partition_keys)})

    return _compute


def build_defs(assets: int = 5, fail_at: int | None = 2) -> dg.Definitions:
    chain: list[dg.AssetsDefinition] = []
    for i in range(assets):
        chain.append(_asset(i, chain[-1:], i == fail_at))
    return dg.Definitions(assets=chain, jobs=[dg.define_asset_job(JOB)])


defs = build_defs()
