"""Seeded generator of realistic multi-agent sessions, as OpenTelemetry span rows.

The rows use the column layout of the ClickHouse OTel exporter, as recorded from
LangGraph applications instrumented with the `ioa_observe` SDK (see the files in
`../shared/data/real-traces/`), so they go through the normal ingestion unchanged.

One session is one trace: a `LangGraph.workflow` root, under it a sequence of agent
activations (`<agent>.agent`) with hand-off loops, and inside each agent its
`agent_start_event` / `agent_end_event` spans, LLM calls (sometimes wrapped in a
`.task` span) and tool calls (some with an HTTP `POST` child). A few tool and LLM
calls fail with an exception event. Everything is drawn from one `random.Random`,
so the same seed always gives the same rows, byte for byte once written.

    python -m mce_dagster.synthetic OUT.json --sessions 1000 --seed 0
"""

from __future__ import annotations

import argparse
import json
import math
import random
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

TOOL_FAILURE_RATE = 0.08
LLM_FAILURE_RATE = 0.02

# (ScopeName, ScopeVersion) of the instrumentations that emit each kind of span.
LANGCHAIN_SCOPE = ("opentelemetry.instrumentation.langchain", "0.43.1")
AGENT_SCOPE = ("ioa.observe.tracer", "")
EVENT_SCOPE = ("ioa_observe.sdk.decorators.base", "")
HTTP_SCOPE = ("opentelemetry.instrumentation.requests", "0.54b1")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_YEAR_START_US = int((datetime(2025, 1, 1, tzinfo=timezone.utc) - _EPOCH).total_seconds()) * 1_000_000
_YEAR_US = 365 * 24 * 3600 * 1_000_000
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


# --------------------------------------------------------------------------- catalogue


@dataclass(frozen=True)
class ToolError:
    type: str
    message: str
    # What the tool's HTTP API answered; None when no answer came (timeout, refused).
    http_status: int | None = None


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args: dict[str, tuple[str, ...]]  # argument -> example values ("{topic}" is filled in)
    outputs: tuple[str, ...]  # result templates, filled with the topic and the arguments
    errors: tuple[ToolError, ...]
    url: str | None = None  # the HTTP API behind the tool, if any


@dataclass(frozen=True)
class Agent:
    name: str
    notes: tuple[str, ...]  # what the agent hands back ("{topic}", "{next}")
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class App:
    name: str
    topology: str  # "supervisor", "pipeline" or "pair"
    agents: tuple[Agent, ...]
    topics: tuple[str, ...]
    requests: tuple[str, ...]
    answers: tuple[str, ...]

    def agent(self, name: str) -> Agent:
        return next(a for a in self.agents if a.name == name)


@dataclass(frozen=True)
class Model:
    request: str  # gen_ai.request.model
    response: str  # gen_ai.response.model
    client: str  # the LangChain class, which names the span
    provider: str  # ls_provider
    system: str  # gen_ai.system
    weight: int


MODELS: tuple[Model, ...] = (
    Model("gpt-4o", "gpt-4o-2024-08-06", "ChatOpenAI", "openai", "openai", 28),
    Model("gpt-4o-2024-08-06", "gpt-4o-2024-08-06", "AzureChatOpenAI", "azure", "azure", 12),
    Model("gpt-4o-mini", "gpt-4o-mini-2024-07-18", "ChatOpenAI", "openai", "openai", 22),
    Model("gpt-4o-mini", "gpt-4o-mini-2024-07-18", "AzureChatOpenAI", "azure", "azure", 6),
    Model("gpt-3.5-turbo", "gpt-3.5-turbo-0125", "ChatOpenAI", "openai", "openai", 10),
    Model("claude-3-5-sonnet-20241022", "claude-3-5-sonnet-20241022", "ChatAnthropic", "anthropic", "anthropic", 15),
    # A self-hosted model behind an OpenAI-compatible endpoint: in no price table.
    Model("acme-llm-7b", "acme-llm-7b", "ChatOpenAI", "openai", "openai", 2),
)

# LLM errors as the provider SDKs raise them: (type, message, duration range in µs).
_LLM_ERRORS: dict[str, tuple[tuple[str, str, tuple[int, int]], ...]] = {
    "openai": (
        ("RateLimitError", "Error code: 429 - {'error': {'message': 'Rate limit reached for {model} on tokens per min (TPM)', 'type': 'tokens', 'code': 'rate_limit_exceeded'}}", (300_000, 800_000)),
        ("APITimeoutError", "Request timed out.", (3_000_000, 4_000_000)),
        ("InternalServerError", "Error code: 500 - {'error': {'message': 'The server had an error while processing your request.', 'type': 'server_error'}}", (300_000, 2_000_000)),
    ),
    "anthropic": (
        ("OverloadedError", "Error code: 529 - {'type': 'error', 'error': {'type': 'overloaded_error', 'message': 'Overloaded'}}", (300_000, 900_000)),
        ("RateLimitError", "Error code: 429 - {'type': 'error', 'error': {'type': 'rate_limit_error', 'message': 'Number of request tokens has exceeded your per-minute rate limit'}}", (300_000, 700_000)),
    ),
}
_LLM_ERRORS["azure"] = _LLM_ERRORS["openai"]


def _http_errors(host: str, url: str) -> tuple[ToolError, ...]:
    return (
        ToolError("HTTPError", f"429 Client Error: Too Many Requests for url: {url}", 429),
        ToolError("HTTPError", f"503 Server Error: Service Unavailable for url: {url}", 503),
        ToolError("ReadTimeout", f"HTTPSConnectionPool(host='{host}', port=443): Read timed out. (read timeout=30)"),
    )


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            "tavily_search_results_json",
            "A search engine optimized for comprehensive, accurate, and trusted results. Input should be a search query.",
            {"query": ("{topic} latest research", "{topic} 2025 review", "{topic} pros and cons", "{topic} news")},
            (
                '[{"url": "https://www.nature.com/articles/s41586-024-08112-3", "content": "A 2024 study on {topic} reports consistent gains across three independent cohorts."}]',
                '[{"url": "https://en.wikipedia.org/wiki/Main_Page", "content": "Overview of {topic}: history, current approaches and open problems."}, {"url": "https://www.sciencedaily.com/news/", "content": "Researchers publish new results on {topic}."}]',
            ),
            _http_errors("api.tavily.com", "https://api.tavily.com/search"),
            "https://api.tavily.com/search",
        ),
        Tool(
            "arxiv_search",
            "Search arXiv for scientific papers. Input is a search query; returns titles, authors and abstracts.",
            {"query": ("{topic}", "{topic} survey", "{topic} benchmark")},
            (
                "Published: 2024-11-04\nTitle: A Survey of {topic}\nAuthors: L. Chen, M. Rossi\nSummary: We review recent progress on {topic} and list open questions.",
                "Published: 2025-02-17\nTitle: Scaling Laws for {topic}\nAuthors: A. Novak et al.\nSummary: Results improve predictably with scale, up to a plateau.",
            ),
            _http_errors("export.arxiv.org", "https://export.arxiv.org/api/query"),
            "https://export.arxiv.org/api/query",
        ),
        Tool(
            "wikipedia_lookup",
            "Look up a topic on Wikipedia and return the summary of the best matching page.",
            {"query": ("{topic}",)},
            ("Page: {query}\nSummary: {query} is an active area of research and industrial development.",),
            (ToolError("PageError", 'Page id "{query}" does not match any pages. Try another id!', 200),)
            + _http_errors("en.wikipedia.org", "https://en.wikipedia.org/w/api.php")[2:],
            "https://en.wikipedia.org/w/api.php",
        ),
        Tool(
            "search_codebase",
            "Search the repository for a string or symbol; returns matching file paths and lines.",
            {"query": ("def export_csv", "class RetryPolicy", "rate_limit", "paginate(", "parse_date")},
            ("Found 3 matches for '{query}': src/app/export.py:42, src/app/http_client.py:118, tests/test_export.py:9",),
            (ToolError("TimeoutError", "search did not finish within 20 seconds"),),
        ),
        Tool(
            "read_file",
            "Read a file of the repository and return its content.",
            {"path": ("src/app/export.py", "src/app/http_client.py", "src/app/auth/limiter.py", "src/app/orders/views.py", "tests/test_export.py")},
            ("# {path}\ndef handle(request):\n    rows = load(request)\n    return render(rows)\n(118 lines)",),
            (ToolError("FileNotFoundError", "[Errno 2] No such file or directory: '{path}'"),),
        ),
        Tool(
            "write_file",
            "Write content to a file of the repository, replacing it.",
            {
                "path": ("src/app/export.py", "src/app/http_client.py", "tests/test_export.py"),
                "content": ("if not rows:\n    return []", "retries = max(0, retries - 1)", "assert export([]) == []"),
            },
            ("Wrote 1.4 KB to {path}",),
            (ToolError("PermissionError", "[Errno 13] Permission denied: '{path}'"),),
        ),
        Tool(
            "python_repl",
            "A Python shell. Use this to execute python commands. Input should be a valid python command.",
            {"code": ("print(parse_date('2025-01-31'))", "import statistics; print(statistics.mean([12, 15, 11]))", "print(len(rows))")},
            ("2025-01-31 00:00:00", "12.666666666666666", "48"),
            (ToolError("NameError", "name 'rows' is not defined"), ToolError("ZeroDivisionError", "division by zero")),
        ),
        Tool(
            "git_diff",
            "Show the diff of the working tree against a git reference.",
            {"ref": ("HEAD~1", "main", "HEAD")},
            (" src/app/export.py | 12 ++++++++----\n 1 file changed, 8 insertions(+), 4 deletions(-)",),
            (ToolError("GitCommandError", "Cmd('git') failed due to: exit code(128)\n  stderr: 'fatal: bad revision'"),),
        ),
        Tool(
            "run_tests",
            "Run the test suite (pytest) on a path and return the summary.",
            {"target": ("tests/", "tests/test_export.py", "tests/unit")},
            ("48 passed in 3.21s", "47 passed, 1 failed in 3.40s"),
            (ToolError("TimeoutExpired", "Command 'pytest {target}' timed out after 120 seconds"),),
        ),
        Tool(
            "lookup_order",
            "Look up an order by its id; returns status, items and totals.",
            {"order_id": ("48213", "51907", "60244", "39118")},
            ('{"order_id": "{order_id}", "status": "delivered", "total": "49.90", "currency": "EUR", "charges": 2}',),
            (ToolError("HTTPError", "404 Client Error: Not Found for url: https://api.shop.example.com/v1/orders/lookup", 404),)
            + _http_errors("api.shop.example.com", "https://api.shop.example.com/v1/orders/lookup")[1:],
            "https://api.shop.example.com/v1/orders/lookup",
        ),
        Tool(
            "refund_payment",
            "Refund a payment of an order, fully or in part.",
            {"order_id": ("48213", "51907", "60244"), "amount": ("49.90", "19.00", "129.00")},
            ('{"id": "re_3QvR2s", "object": "refund", "amount": "{amount}", "status": "succeeded"}',),
            (ToolError("InvalidRequestError", "Charge for order {order_id} has already been refunded.", 400),),
            "https://api.stripe.com/v1/refunds",
        ),
        Tool(
            "search_kb",
            "Search the support knowledge base; returns the best matching articles.",
            {"query": ("router disconnects every few minutes", "login fails after update", "reset password email not received")},
            ("KB-1123 '{query}': update the firmware to 2.1.5, then restart the device.",),
            _http_errors("support.example.com", "https://support.example.com/api/search")[2:],
            "https://support.example.com/api/search",
        ),
        Tool(
            "create_ticket",
            "Open a ticket for the specialist support team.",
            {"subject": ("Customer issue: {topic}",), "priority": ("normal", "high", "urgent")},
            ('{"ticket": {"id": 20931, "status": "new", "priority": "{priority}"}}',),
            (ToolError("HTTPError", "422 Client Error: Unprocessable Entity for url: https://example.zendesk.com/api/v2/tickets.json", 422),),
            "https://example.zendesk.com/api/v2/tickets.json",
        ),
        Tool(
            "search_flights",
            "Search flight offers between two airports on a date.",
            {"origin": ("MUC", "FRA", "AMS", "ZRH"), "destination": ("LIS", "KIX", "BER", "BCN", "JFK", "INN"), "date": ("2025-04-12", "2025-05-02", "2025-10-17")},
            ("3 offers {origin}-{destination} on {date}: 312 EUR direct (2h35), 268 EUR one stop (5h10), 405 EUR direct (2h40).",),
            (ToolError("HTTPError", "400 Client Error: Bad Request for url: https://test.api.amadeus.com/v2/shopping/flight-offers", 400),)
            + _http_errors("test.api.amadeus.com", "https://test.api.amadeus.com/v2/shopping/flight-offers")[1:],
            "https://test.api.amadeus.com/v2/shopping/flight-offers",
        ),
        Tool(
            "search_hotels",
            "Search hotels in a city for a check-in date; returns names, ratings and prices per night.",
            {"city": ("Lisbon", "Kyoto", "Berlin", "Barcelona", "New York", "Innsbruck"), "checkin": ("2025-04-12", "2025-05-02", "2025-10-17")},
            ("Hotels in {city} from {checkin}: Hotel Avenida 4* 140 EUR, Casa Azul 3* 95 EUR, Grand Central 5* 260 EUR.",),
            _http_errors("api.hotels.example.com", "https://api.hotels.example.com/v1/search"),
            "https://api.hotels.example.com/v1/search",
        ),
        Tool(
            "get_weather",
            "Get the weather forecast for a city.",
            {"city": ("Lisbon", "Kyoto", "Berlin", "Barcelona", "New York", "Innsbruck")},
            ("{city}: 18-24 C, mostly sunny, 10% chance of rain.",),
            (ToolError("HTTPError", "401 Client Error: Unauthorized for url: https://api.openweathermap.org/data/2.5/forecast", 401),),
            "https://api.openweathermap.org/data/2.5/forecast",
        ),
        Tool(
            "currency_convert",
            "Convert an amount of euros to another currency at today's rate.",
            {"amount": ("312", "1280", "560"), "to": ("USD", "JPY", "CHF")},
            ("{amount} EUR = 1.08 x {amount} {to} at today's rate",),
            (ToolError("ValueError", "Unknown currency code 'EU'"),),
        ),
        Tool(
            "readability_score",
            "Compute readability statistics (Flesch reading ease, grade level) of a text.",
            {"text": ("Draft on {topic}: five practical tips...", "Why {topic} matters, in 300 words...")},
            ("Flesch reading ease: 64.2 (standard), grade level 8.1, 298 words", "Flesch reading ease: 48.9 (difficult), grade level 11.4, 341 words"),
            (ToolError("ValueError", "text is empty"),),
        ),
        Tool(
            "describe_table",
            "Describe the columns of a table of the analytics database.",
            {"table": ("orders", "customers", "events", "shipments")},
            ("{table}: id INTEGER, created_at TIMESTAMP, region TEXT, amount NUMERIC, customer_id INTEGER",),
            (ToolError("ProgrammingError", 'relation "{table}" does not exist'),),
        ),
        Tool(
            "run_sql",
            "Run a read-only SQL query on the analytics database and return the rows.",
            {
                "query": (
                    "SELECT region, date_trunc('month', created_at) AS month, sum(amount) FROM orders GROUP BY 1, 2",
                    "SELECT signup_cohort, avg(churned::int) FROM customers GROUP BY 1",
                    "SELECT carrier, avg(delivered_at - shipped_at) FROM shipments GROUP BY 1",
                )
            },
            ("12 rows; first: ('EMEA', '2024-01', 182340.50)", "8 rows; first: ('2024-01', 0.071)"),
            (ToolError("OperationalError", "canceling statement due to statement timeout"),),
        ),
        Tool(
            "plot_chart",
            "Plot a chart of the last query result and save it as an image.",
            {"kind": ("bar", "line"), "title": ("{topic}",)},
            ("Saved chart.png (800x500): {kind} chart '{title}'",),
            (ToolError("ValueError", "x and y must have same first dimension, but have shapes (12,) and (11,)"),),
        ),
    )
}

_ROUTE = ('{"next": "{next}"}',)

APPS: tuple[App, ...] = (
    App(
        "research-assistant",
        "supervisor",
        (
            Agent("supervisor", _ROUTE),
            Agent("researcher", ("Collected five sources on {topic}; the two most cited are from 2024.", "Search done: the literature on {topic} agrees on the main trend."), ("tavily_search_results_json", "arxiv_search")),
            Agent("fact_checker", ("Checked four claims about {topic}: three confirmed, one unsupported.", "All key claims about {topic} match at least two sources."), ("tavily_search_results_json", "wikipedia_lookup")),
            Agent("writer", ("Drafted a 200-word briefing on {topic}.", "Revised the briefing on {topic} after review.")),
        ),
        ("solid-state batteries", "CRISPR base editing", "retrieval-augmented generation", "microplastics in drinking water", "small modular reactors", "urban heat islands", "mRNA cancer vaccines", "quantum error correction"),
        (
            "What are the most important findings of the last two years on {topic}?",
            "Write a short briefing on {topic} for a non-specialist audience, with sources.",
            "Compare the main approaches to {topic} and say which looks most promising.",
            "Give me three recent papers on {topic} with a one-line summary each.",
        ),
        (
            "Briefing on {topic}: recent work shows steady progress; the main open problems are cost and scale. Sources: three papers and one review.",
            "Summary on {topic}: the studies agree, the strongest results are from 2024 trials, and one popular claim could not be verified.",
            "Three recent papers on {topic} are listed with one-line summaries; the 2024 survey is the best place to start.",
            "Short answer: approaches to {topic} differ mainly in maturity; the one with published field results is the most promising today.",
        ),
    ),
    App(
        "code-review-bot",
        "pipeline",
        (
            Agent("planner", ("Plan: locate {topic}, write a failing test, fix it, run the suite.",), ("search_codebase",)),
            Agent("coder", ("Edited two files for {topic}; ready for review.", "Applied the review comments on {topic}."), ("read_file", "write_file", "python_repl")),
            Agent("reviewer", ("Review of {topic}: looks good, one nit on naming.", "Review of {topic}: the None case is still missing, sending back."), ("git_diff", "read_file")),
            Agent("tester", ("Test suite: 48 passed, 0 failed.", "Test suite: 1 failure in the new test, see the log."), ("run_tests",)),
        ),
        ("the CSV export endpoint", "the retry logic of the HTTP client", "the login rate limiter", "the pagination of /orders", "the date parsing in the importer", "the cache invalidation on update"),
        (
            "Fix the bug in {topic}: it crashes on empty input.",
            "Add unit tests for {topic}.",
            "Refactor {topic} so it is easier to read, without changing behaviour.",
            "Review the latest change to {topic} and fix anything risky.",
        ),
        (
            "Done: {topic} now handles empty input; I added a regression test and all 48 tests pass.",
            "I added six unit tests for {topic}; coverage of the module went from 61% to 88%.",
            "Refactored {topic} into three small functions; behaviour is unchanged and the suite passes.",
            "Reviewed {topic}: fixed one off-by-one error and left a TODO about the timeout value.",
        ),
    ),
    App(
        "customer-support-mas",
        "supervisor",
        (
            Agent("triage", _ROUTE),
            Agent("billing_agent", ("Order found; the duplicate charge is confirmed.", "Refund of 49.90 EUR issued."), ("lookup_order", "refund_payment")),
            Agent("tech_support", ("KB-1123 matches the symptoms; suggested a firmware update.", "The issue is known and fixed in the next release."), ("search_kb", "lookup_order")),
            Agent("escalation_agent", ("Ticket 20931 opened with high priority.",), ("create_ticket",)),
        ),
        ("a double charge on order 48213", "a router that keeps disconnecting", "a missing refund for order 51907", "login problems after the app update", "a damaged item in order 60244", "the wrong plan on my invoice"),
        (
            "Hi, I have {topic}. Can you help?",
            "I've been waiting a week about {topic}, please sort it out.",
            "Can someone look into {topic}?",
        ),
        (
            "Sorry about {topic}. It is fixed now and you will get a confirmation email within the hour.",
            "I looked into {topic}: a refund has been issued and should appear in 3-5 business days.",
            "I could not resolve {topic} directly, so our specialist team has a ticket and will contact you within 24 hours.",
        ),
    ),
    App(
        "travel-planner",
        "supervisor",
        (
            Agent("coordinator", _ROUTE),
            Agent("flight_agent", ("Best option: direct flight, 2h35, 312 EUR per person.", "Cheapest option: one stop, 268 EUR per person."), ("search_flights", "currency_convert")),
            Agent("hotel_agent", ("Three hotels under 150 EUR a night near the centre; Hotel Avenida has the best reviews.",), ("search_hotels", "get_weather")),
            Agent("itinerary_writer", ("Day-by-day itinerary drafted for {topic}.",)),
        ),
        ("a long weekend in Lisbon", "a week in Kyoto in April", "a business trip to Berlin", "a family trip to Barcelona", "three days in New York", "a ski week in Innsbruck"),
        (
            "Plan {topic} for two people, budget around 1500 EUR.",
            "Find flights and a hotel for {topic}.",
            "Roughly what would {topic} cost, including flights?",
        ),
        (
            "Plan for {topic}: direct flights at 312 EUR per person, a 4-star hotel near the centre at 140 EUR a night, and a day-by-day itinerary.",
            "For {topic} I found two good options; the cheaper one totals about 1,280 EUR for two people.",
            "Rough budget for {topic}: flights 600 EUR, hotel 560 EUR, food and transport 300 EUR.",
        ),
    ),
    App(
        "blog-writer-duo",
        "pair",
        (
            Agent("writer", ("Draft on {topic} ready for review.", "Revised the post on {topic}: shorter sentences, stronger title."), ("tavily_search_results_json",)),
            Agent("critic", ("Feedback: the intro is too long and tip 3 repeats tip 1.", "Feedback: good structure; cut 40 words and add a concrete example.", "Approved: the post on {topic} reads well."), ("readability_score",)),
        ),
        ("remote work productivity", "home composting", "learning Rust as a Python developer", "budget travel in Japan", "running a first marathon", "houseplants for dark rooms"),
        (
            "Write a 300-word blog post about {topic}.",
            "Draft an engaging intro paragraph on {topic}.",
            "Write a listicle: five tips for {topic}.",
        ),
        (
            "Final post on {topic} (298 words): a punchy intro, five practical tips and a short call to action.",
            "Here is the final intro on {topic}, tightened after two review rounds.",
            "Final listicle on {topic}: five tips, each with a one-line example.",
        ),
    ),
    App(
        "data-analyst-crew",
        "pipeline",
        (
            Agent("sql_agent", ("Query returned 12 rows for {topic}.", "Found the right tables and extracted {topic}."), ("describe_table", "run_sql")),
            Agent("analyst", ("Computed growth rates; August is 2.3 standard deviations below the mean.", "No anomaly beyond the seasonal pattern."), ("python_repl",)),
            Agent("chart_agent", ("Saved a chart of {topic} to chart.png.",), ("plot_chart",)),
        ),
        ("monthly revenue by region", "churn by signup cohort", "the top 10 products by margin", "weekly active users since January", "average delivery time per carrier"),
        (
            "Show me {topic} for 2024.",
            "Analyse {topic} and point out anything unusual.",
            "Build a chart of {topic}.",
        ),
        (
            "Here is {topic}: up 12% year over year, with a dip in August; chart attached.",
            "Analysis of {topic}: two outliers (March and November), both explained by one-off campaigns.",
            "Chart of {topic} saved as chart.png; EMEA has the largest share.",
        ),
    ),
)

# Completions of LLM calls in the middle of an agent's turn, neither a tool request nor its result.
_THINKING = (
    "I need a bit more detail before answering.",
    "Summarizing what has been gathered so far on {topic}.",
    "Checking the previous step before going on.",
)
# Names of the LangChain runnables that sometimes wrap an LLM call in a task span.
_LLM_WRAPPERS = ("call_model", "RunnableSequence", "agent")


# --------------------------------------------------------------------------- helpers


def _fill(template: str, **values: str) -> str:
    """`{name}` placeholders replaced; other braces (JSON) left alone."""
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


def _iso(us: int) -> str:
    return (_EPOCH + timedelta(microseconds=us)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _epoch_seconds(us: int) -> str:
    return f"{us // 1_000_000}.{us % 1_000_000:06d}"


def _uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128), version=4)


def _token(rng: random.Random, length: int) -> str:
    return "".join(rng.choices(_ALNUM, k=length))


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    """Durations are skewed: most calls are quick, a few are slow."""
    return min(high, max(low, round(math.exp(rng.uniform(math.log(low), math.log(high))))))


def _gap(rng: random.Random) -> int:
    """Framework overhead between two sibling spans, in µs."""
    return rng.randint(50, 3000)


def _pick_model(rng: random.Random) -> Model:
    return rng.choices(MODELS, weights=[m.weight for m in MODELS])[0]


def _plan_agents(rng: random.Random, app: App) -> list[str]:
    """The order in which agents are activated: 2 to 12 activations, with loops."""
    names = [a.name for a in app.agents]
    if app.topology == "supervisor":
        hub, workers = names[0], names[1:]
        cast = rng.sample(workers, rng.randint(1, len(workers)))
        sequence = [hub]
        worker = rng.choice(cast)
        for _ in range(rng.randint(1, 5)):
            # A supervisor often sends the same worker back to refine its work.
            if rng.random() < 0.45:
                worker = rng.choice(cast)
            sequence += [worker, hub]
        if rng.random() < 0.2:  # sometimes the last worker answers the user itself
            sequence.pop()
        return sequence
    if app.topology == "pipeline":
        stages = names[: rng.randint(2, len(names))]
        rounds = 1
        # Revision rounds: the whole pipeline runs again (A,B,C,A,B,C).
        while rng.random() < 0.4 and len(stages) * (rounds + 1) <= 12:
            rounds += 1
        return stages * rounds
    # "pair": a writer and a critic taking turns.
    sequence = names[:2] * rng.randint(1, 6)
    if len(sequence) < 12 and rng.random() < 0.6:
        sequence.append(names[0])
    return sequence


def _function_attrs(tools: Sequence[Tool]) -> dict[str, str]:
    attrs = {}
    for i, tool in enumerate(tools):
        schema = {"properties": {arg: {"type": "string"} for arg in tool.args}, "required": list(tool.args), "type": "object"}
        attrs[f"llm.request.functions.{i}.name"] = tool.name
        attrs[f"llm.request.functions.{i}.description"] = tool.description
        attrs[f"llm.request.functions.{i}.parameters"] = json.dumps(schema)
    return attrs


@dataclass(frozen=True)
class _ToolCall:
    tool: Tool
    args: dict[str, str]
    call_id: str


@dataclass(frozen=True)
class _Message:
    role: str
    content: str
    tool_call_id: str = ""


# --------------------------------------------------------------------------- one session


class _Session:
    """Builds the rows of one session; times are integer microseconds since the epoch."""

    def __init__(self, rng: random.Random, app: App):
        self.rng = rng
        self.app = app
        self.session_id = f"{app.name}_{_uuid(rng)}"
        self.trace_id = f"{rng.getrandbits(128):032x}"
        self.topic = rng.choice(app.topics)
        self.request = _fill(rng.choice(app.requests), topic=self.topic)
        self.answer = _fill(rng.choice(app.answers), topic=self.topic)
        # Agents of one app usually share a model; some are configured with another.
        base = _pick_model(rng)
        self.models = {a.name: base if rng.random() < 0.6 else _pick_model(rng) for a in app.agents}
        self.temperatures = {a.name: rng.choice(("0", "0", "0.2", "0.7")) for a in app.agents}
        self.wrappers = {a.name: rng.choice(_LLM_WRAPPERS) if rng.random() < 0.4 else None for a in app.agents}
        self.llm_calls = 0
        self.rows: list[tuple[int, dict[str, Any]]] = []  # (end, row)

    # -- rows

    def new_span_id(self) -> str:
        return f"{self.rng.getrandbits(63) + 1:016x}"

    def emit(
        self,
        span_id: str,
        parent_id: str,
        name: str,
        start: int,
        duration: int,
        attrs: dict[str, str],
        *,
        kind: str = "Internal",
        scope: tuple[str, str] = LANGCHAIN_SCOPE,
        status: str = "Unset",
        message: str = "",
        events: Sequence[tuple[str, int, dict[str, str]]] = (),
    ) -> int:
        attrs = {**attrs, "ioa_start_time": _epoch_seconds(start), "session.id": self.session_id}
        row = {
            "Timestamp": _iso(start),
            "TraceId": self.trace_id,
            "SpanId": span_id,
            "ParentSpanId": parent_id,
            "TraceState": "",
            "SpanName": name,
            "SpanKind": kind,
            "ServiceName": self.app.name,
            "ResourceAttributes": {"service.name": self.app.name},
            "ScopeName": scope[0],
            "ScopeVersion": scope[1],
            "SpanAttributes": dict(sorted(attrs.items())),  # ClickHouse maps come out sorted
            "Duration": duration * 1000,
            "StatusCode": status,
            "StatusMessage": message,
            "EventsTimestamp": [_iso(ts) for _, ts, _ in events],
            "EventsName": [event for event, _, _ in events],
            "EventsAttributes": [attributes for _, _, attributes in events],
            "LinksTraceId": [],
            "LinksSpanId": [],
            "LinksTraceState": [],
            "LinksAttributes": [],
        }
        self.rows.append((start + duration, row))
        return start + duration

    def emit_failed(
        self,
        span_id: str,
        parent_id: str,
        name: str,
        start: int,
        duration: int,
        attrs: dict[str, str],
        error_type: str,
        error_message: str,
        stack: str,
        **kw: Any,
    ) -> int:
        """A span that raised: Error status and an OTel exception event."""
        end = start + duration
        event_at = max(start, end - self.rng.randint(10, 200))
        exception = {
            "exception.type": error_type,
            "exception.message": error_message,
            "exception.stacktrace": f"Traceback (most recent call last):\n{stack}{error_type}: {error_message}\n",
        }
        return self.emit(
            span_id, parent_id, name, start, duration, attrs,
            status="Error", message=f"{error_type}: {error_message}",
            events=[("exception", event_at, exception)], **kw,
        )

    def ordered_rows(self) -> list[dict[str, Any]]:
        # Exporters write spans as they end: children before their parents.
        return [row for _, row in sorted(self.rows, key=lambda item: item[0])]

    # -- structure

    def run(self) -> list[dict[str, Any]]:
        rng = self.rng
        root_id = self.new_span_id()
        start = _YEAR_START_US + rng.randrange(_YEAR_US - 3_600_000_000)
        sequence = _plan_agents(rng, self.app)
        t = start + rng.randint(200, 3000)
        handoff: list[_Message] = []
        for step in range(len(sequence)):
            t, handoff = self.agent(sequence, step, root_id, t, handoff)
            t += _gap(rng)
        attrs = {
            "ioa_observe.workflow.name": self.app.name,
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "LangGraph",
            "traceloop.workflow.name": "LangGraph",
            "traceloop.entity.input": json.dumps({"inputs": {"messages": [self.request]}, "tags": [], "metadata": {}, "kwargs": {"name": "LangGraph"}}),
            "traceloop.entity.output": json.dumps({"outputs": {"messages": [self.request, self.answer]}}),
        }
        self.emit(root_id, "", "LangGraph.workflow", start, t - start, attrs)
        return self.ordered_rows()

    def agent(
        self, sequence: list[str], step: int, parent_id: str, start: int, handoff: list[_Message]
    ) -> tuple[int, list[_Message]]:
        """One activation of an agent; returns its end and what it hands to the next one."""
        rng = self.rng
        agent = self.app.agent(sequence[step])
        is_last = step == len(sequence) - 1
        span_id = self.new_span_id()
        context = {
            "agent_id": agent.name,
            "ioa_observe.workflow.name": agent.name,
            "ioa_observe.association.properties.langgraph_node": agent.name,
            "ioa_observe.association.properties.langgraph_step": str(step + 1),
            "ioa_observe.association.properties.langgraph_path": json.dumps(["__pregel_pull", agent.name]),
            "ioa_observe.association.properties.langgraph_triggers": json.dumps([f"branch:to:{agent.name}"]),
            "ioa_observe.association.properties.langgraph_checkpoint_ns": f"{agent.name}:{_uuid(rng)}",
        }
        agent_event = {"agent_name": agent.name, "description": "", "type": "agent"}
        t = self.event(context, span_id, start + rng.randint(20, 300), "agent_start_event", agent_event) + _gap(rng)

        tools = [TOOLS[name] for name in agent.tools]
        n_tools = rng.choices(range(5), weights=(30, 30, 20, 12, 8))[0] if tools else 0
        n_llm = rng.choices((1, 2, 3), weights=(50, 35, 15))[0]
        if n_tools:  # every tool batch is requested by one LLM call and read by the next
            n_llm = max(n_llm, 2)
        batches = [0] * n_llm
        for _ in range(n_tools):
            batches[rng.randrange(n_llm - 1)] += 1

        messages = handoff
        text = ""
        for k in range(n_llm):
            calls = [self.plan_tool_call(rng.choice(tools), agent) for _ in range(batches[k])]
            if calls:
                text = ""
            elif k < n_llm - 1:
                text = _fill(rng.choice(_THINKING), topic=self.topic)
            elif is_last:
                text = self.answer
            else:
                text = _fill(rng.choice(agent.notes), topic=self.topic, next=sequence[step + 1])
            prompt = [_Message("user", self.request), *messages]
            t = self.llm(agent, tools, context, span_id, t, prompt, text, calls) + _gap(rng)
            messages = [_Message("assistant", text)]
            if calls:
                messages = []
                for call in calls:
                    t, result = self.tool(context, span_id, t, call)
                    messages.append(result)
                    t += _gap(rng)

        t = self.event(context, span_id, t, "agent_end_event", {"agent_name": agent.name, "type": "agent"})
        end = t + rng.randint(20, 800)
        attrs = {
            **context,
            "ioa_observe.span.kind": "agent",
            "ioa_observe.entity.name": agent.name,
            "execution.success": "true",
            "agent_chain_start_time": _epoch_seconds(start + 40),
            "ioa_observe.entity.input": json.dumps({"args": [{"messages": [self.request]}], "kwargs": {}}),
            "ioa_observe.entity.output": json.dumps({"messages": [text]}),
        }
        self.emit(
            span_id, parent_id, f"{agent.name}.agent", start, end - start, attrs,
            scope=AGENT_SCOPE, events=[("agent_start_event", start + rng.randint(5, 60), agent_event)],
        )
        return end, [_Message("assistant", text)]

    def event(
        self, context: dict[str, str], parent_id: str, start: int, name: str, attributes: dict[str, str]
    ) -> int:
        """The tiny spans the ioa_observe SDK opens around an agent's start and end."""
        rng = self.rng
        duration = rng.randint(15, 150)
        return self.emit(
            self.new_span_id(), parent_id, name, start, duration, context,
            scope=EVENT_SCOPE, events=[(name, start + rng.randint(1, duration - 1), attributes)],
        )

    # -- LLM calls

    def llm(
        self,
        agent: Agent,
        tools: list[Tool],
        context: dict[str, str],
        parent_id: str,
        start: int,
        prompt: list[_Message],
        text: str,
        calls: list[_ToolCall],
    ) -> int:
        """An LLM call, retried after a failed attempt (as the provider clients do)."""
        rng = self.rng
        model = self.models[agent.name]
        t = start
        for attempt in range(3):
            failure = rng.choice(_LLM_ERRORS[model.provider]) if attempt < 2 and rng.random() < LLM_FAILURE_RATE else None
            wrapper = self.wrappers[agent.name]
            if wrapper is None:
                t = self.llm_attempt(agent, model, tools, context, parent_id, t, prompt, text, calls, failure)
            else:
                task_id = self.new_span_id()
                inner_end = self.llm_attempt(agent, model, tools, context, task_id, t + rng.randint(30, 400), prompt, text, calls, failure)
                end = inner_end + rng.randint(20, 300)
                task_attrs = {**context, "traceloop.span.kind": "task", "traceloop.entity.name": wrapper, "traceloop.workflow.name": "LangGraph"}
                t = self.emit(task_id, parent_id, f"{wrapper}.task", t, end - t, task_attrs)
            if failure is None:
                return t
            t += rng.randint(200_000, 1_500_000)  # back-off before the retry
        raise AssertionError("the last attempt never fails")

    def llm_attempt(
        self,
        agent: Agent,
        model: Model,
        tools: list[Tool],
        context: dict[str, str],
        parent_id: str,
        start: int,
        prompt: list[_Message],
        text: str,
        calls: list[_ToolCall],
        failure: tuple[str, str, tuple[int, int]] | None,
    ) -> int:
        rng = self.rng
        span_id = self.new_span_id()
        name = f"{model.client}.chat"
        attrs = {
            **context,
            "llm.request.type": "chat",
            "gen_ai.system": model.system,
            "gen_ai.request.model": model.request,
            "gen_ai.request.temperature": self.temperatures[agent.name],
            "ioa_observe.association.properties.ls_provider": model.provider,
            "ioa_observe.association.properties.ls_model_name": model.request,
            "ioa_observe.association.properties.ls_model_type": "chat",
            "traceloop.workflow.name": "LangGraph",
            **_function_attrs(tools),
        }
        for i, message in enumerate(prompt):
            attrs[f"gen_ai.prompt.{i}.role"] = message.role
            attrs[f"gen_ai.prompt.{i}.content"] = message.content
            if message.tool_call_id:
                attrs[f"gen_ai.prompt.{i}.tool_call_id"] = message.tool_call_id
        if failure is not None:
            error_type, error_message, (low, high) = failure
            stack = (
                '  File "/usr/local/lib/python3.12/site-packages/langchain_core/language_models/chat_models.py", line 690, in generate\n'
                "    self._generate_with_cache(\n"
                f'  File "/usr/local/lib/python3.12/site-packages/{model.provider}/_base_client.py", line 1047, in request\n'
                "    raise self._make_status_error_from_response(err.response) from None\n"
            )
            message = _fill(error_message, model=model.request)
            duration = rng.randint(low, high)
            return self.emit_failed(
                span_id, parent_id, name, start, duration, attrs, error_type, message, stack, kind="Client"
            )

        self.llm_calls += 1
        # Prompts grow along the session: the message history is sent every time.
        prompt_tokens = sum(len(m.content) // 4 for m in prompt) + 90 * len(tools) + rng.randint(120, 700) + 180 * self.llm_calls
        completion_tokens = (rng.randint(5, 40) + 18 * len(calls)) if calls else len(text) // 4 + rng.randint(10, 300)
        cache_read = 0
        if prompt_tokens >= 1024 and rng.random() < 0.3:  # prompt caching works in 128-token steps
            cache_read = 1024 + 128 * rng.randint(0, (prompt_tokens - 1024) // 128)
        anthropic = model.provider == "anthropic"
        attrs.update(
            {
                "gen_ai.response.model": model.response,
                "gen_ai.response.id": f"msg_01{_token(rng, 22)}" if anthropic else f"chatcmpl-{_token(rng, 29)}",
                "gen_ai.usage.prompt_tokens": str(prompt_tokens),
                "gen_ai.usage.completion_tokens": str(completion_tokens),
                "gen_ai.usage.cache_read_input_tokens": str(cache_read),
                "llm.usage.total_tokens": str(prompt_tokens + completion_tokens),
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": text,
            }
        )
        if calls:
            attrs["gen_ai.completion.0.finish_reason"] = "tool_use" if anthropic else "tool_calls"
            for j, call in enumerate(calls):
                attrs[f"gen_ai.completion.0.tool_calls.{j}.id"] = call.call_id
                attrs[f"gen_ai.completion.0.tool_calls.{j}.name"] = call.tool.name
                attrs[f"gen_ai.completion.0.tool_calls.{j}.arguments"] = json.dumps(call.args)
        else:
            attrs["gen_ai.completion.0.finish_reason"] = "end_turn" if anthropic else "stop"
        # Latency follows the generated tokens, within 0.3-4 s.
        duration = min(4_000_000, 300_000 + completion_tokens * rng.randint(3_000, 9_000) + rng.randint(0, 500_000))
        return self.emit(span_id, parent_id, name, start, duration, attrs, kind="Client")

    # -- tool calls

    def plan_tool_call(self, tool: Tool, agent: Agent) -> _ToolCall:
        rng = self.rng
        args = {arg: _fill(rng.choice(values), topic=self.topic) for arg, values in tool.args.items()}
        anthropic = self.models[agent.name].provider == "anthropic"
        call_id = f"toolu_01{_token(rng, 22)}" if anthropic else f"call_{_token(rng, 24)}"
        return _ToolCall(tool, args, call_id)

    def tool(
        self, context: dict[str, str], parent_id: str, start: int, call: _ToolCall
    ) -> tuple[int, _Message]:
        """A tool call; returns its end and the message the agent's next LLM call reads."""
        rng = self.rng
        tool = call.tool
        span_id = self.new_span_id()
        error = rng.choice(tool.errors) if rng.random() < TOOL_FAILURE_RATE else None
        values = {"topic": self.topic, **call.args}
        if tool.url:
            http_start = start + rng.randint(300, 3000)
            http_end = self.http(context, span_id, http_start, tool.url, error)
            duration = http_end + rng.randint(200, 1500) - start
        else:
            duration = _log_uniform(rng, 50_000, 3_000_000)
        attrs = {
            **context,
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": tool.name,
            "traceloop.workflow.name": "LangGraph",
            "traceloop.entity.input": json.dumps({"input_str": str(call.args), "inputs": call.args, "tool_call_id": call.call_id}),
        }
        if error is None:
            output = _fill(rng.choice(tool.outputs), **values)
            attrs["traceloop.entity.output"] = json.dumps(
                {"output": {"content": output, "type": "tool", "name": tool.name, "tool_call_id": call.call_id, "status": "success"}}
            )
            end = self.emit(span_id, parent_id, f"{tool.name}.tool", start, duration, attrs)
            return end, _Message("tool", output, call.call_id)
        message = _fill(error.message, **values)
        stack = (
            '  File "/usr/local/lib/python3.12/site-packages/langchain_core/tools/base.py", line 884, in run\n'
            "    response = context.run(self._run, *tool_args, **tool_kwargs)\n"
            f'  File "/app/{self.app.name.replace("-", "_")}/tools.py", line {rng.randint(20, 240)}, in {tool.name}\n'
            f"    return _call_{tool.name}(**kwargs)\n"
        )
        end = self.emit_failed(span_id, parent_id, f"{tool.name}.tool", start, duration, attrs, error.type, message, stack)
        # LangGraph's ToolNode hands the error back to the model as the tool's answer.
        return end, _Message("tool", f"Error: {error.type}('{message}')\n Please fix your mistakes.", call.call_id)

    def http(
        self, context: dict[str, str], parent_id: str, start: int, url: str, error: ToolError | None
    ) -> int:
        """The HTTP request a tool makes: a span that is not a call."""
        rng = self.rng
        span_id = self.new_span_id()
        # The tool adds 0.5-4.5 ms around it, so tool calls stay within 0.05-3 s.
        duration = rng.randint(49_500, 2_995_000)
        attrs = {**context, "http.method": "POST", "http.url": url}
        status = 200 if error is None else error.http_status
        if status is None:  # no answer: requests raised, and the span recorded it
            stack = '  File "/usr/local/lib/python3.12/site-packages/requests/adapters.py", line 713, in send\n    raise ReadTimeout(e, request=request)\n'
            return self.emit_failed(
                span_id, parent_id, "POST", start, duration, attrs, error.type, error.message, stack,
                kind="Client", scope=HTTP_SCOPE,
            )
        attrs["http.status_code"] = str(status)
        status_code = "Error" if status >= 400 else "Unset"
        return self.emit(
            span_id, parent_id, "POST", start, duration, attrs, kind="Client", scope=HTTP_SCOPE, status=status_code
        )


# --------------------------------------------------------------------------- API


@dataclass(frozen=True)
class SyntheticSummary:
    sessions: int
    spans: int
    path: Path


def generate_session_rows(rng: random.Random) -> list[dict[str, Any]]:
    """The span rows of one session, in export order (each span after its children)."""
    return _Session(rng, rng.choice(APPS)).run()


def generate_rows(n_sessions: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """The rows of `n_sessions` sessions, session after session, generated lazily."""
    rng = random.Random(seed)
    for _ in range(n_sessions):
        yield from generate_session_rows(rng)


def write_export(path: str | Path, n_sessions: int, seed: int = 0) -> SyntheticSummary:
    """Writes the rows as one JSON list, a row at a time, so memory stays flat."""
    path = Path(path)
    spans = 0
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        out.write("[")
        for row in generate_rows(n_sessions, seed):
            if spans:
                out.write(",\n")
            out.write(json.dumps(row, separators=(",", ":")))
            spans += 1
        out.write("]\n")
    return SyntheticSummary(sessions=n_sessions, spans=spans, path=path)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m mce_dagster.synthetic",
        description="Write a seeded synthetic export of multi-agent sessions (OTel span rows, ClickHouse layout).",
    )
    parser.add_argument("out", type=Path, help="the JSON file to write")
    parser.add_argument("--sessions", type=int, default=100, help="number of sessions (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    if args.sessions < 0:
        parser.error("--sessions must be >= 0")
    summary = write_export(args.out, args.sessions, args.seed)
    print(f"wrote {summary.spans} spans of {summary.sessions} sessions (seed {args.seed}) to {summary.path}")


if __name__ == "__main__":
    main()
