"""What synthetic sessions are made of: the applications, their agents, the tools
the agents call and the models behind them, with the errors each can raise.

Modelled on the LangGraph applications of the real traces; every value here is
drawn by the builder from one seeded `random.Random`, so changing an entry (or its
order) changes the generated data for every seed.
"""

from __future__ import annotations

from dataclasses import dataclass


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
LLM_ERRORS: dict[str, tuple[tuple[str, str, tuple[int, int]], ...]] = {
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
LLM_ERRORS["azure"] = LLM_ERRORS["openai"]


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
THINKING = (
    "I need a bit more detail before answering.",
    "Summarizing what has been gathered so far on {topic}.",
    "Checking the previous step before going on.",
)
# Names of the LangChain runnables that sometimes wrap an LLM call in a task span.
LLM_WRAPPERS = ("call_model", "RunnableSequence", "agent")
