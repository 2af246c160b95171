"""The tasks real agents are given (issue 33, item 6), with the tools they call, as plain functions each
framework wraps in its own way.

``QUESTIONS``: five tool-using questions with known answers, shared by smolagents, pydantic-ai, the OpenAI
Agents SDK and LangChain: one asks for a value "today" (``get_weather`` returns ``Snow, -3 C``), one calls two
tools in a row, and one is a conversation of two questions whose first tool returns 20+ KB (an order
export), so the second question's requests carry that result again (direct) or what the engine makes of it.
``BUGS``: five bug fixes in a small scratch repository for mini-swe-agent, each checked by running its
tests; one has the upstream answer once without a tool call.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fakes.agent_upstream import TESTS_PASSED, BugTask, Hop, QuestionTask, Turn

# ------------------------------------------------------------------ tools

WEATHER = {"Oslo": "Snow, -3 C", "Lisbon": "Sunny, 19 C"}
POPULATION = {"Lyon": "Lyon: 522,250 inhabitants (2021 census)"}
RATES = {"EUR/NOK": "EUR/NOK = 11.72 (ECB reference rate)"}
ORDERS = {"O-4821": "order O-4821: carrier=Dachser status=shipped weight=12kg"}
PHONES = {"Dachser": "Dachser: +49 831 5916 0", "Kuehne": "Kuehne: +41 44 786 9511",
          "Schenker": "Schenker: +49 201 8781 0", "GLS": "GLS: +49 6677 646 907 0"}
_OTHERS = ("Dachser", "Schenker", "GLS")


def get_weather(city: str) -> str:
    """The weather in a city right now."""
    return WEATHER.get(city, f"no weather station for {city}")


def get_population(city: str) -> str:
    """The population of a city, from the latest census."""
    return POPULATION.get(city, f"no census data for {city}")


def exchange_rate(pair: str) -> str:
    """The exchange rate of a currency pair such as EUR/USD."""
    return RATES.get(pair, f"no rate for {pair}")


def lookup_order(order_id: str) -> str:
    """An order's carrier and status, by its id."""
    return ORDERS.get(order_id, f"no order {order_id}")


def carrier_phone(carrier: str) -> str:
    """A carrier's customer service phone number."""
    return PHONES.get(carrier, f"no carrier named {carrier}")


def export_orders(month: str) -> str:
    """Every order of a month, one line each (a large export)."""
    if month != "March":
        return f"no export for {month}"
    lines = [f"O-{1000 + i} | carrier={'Kuehne' if i == 234 else _OTHERS[i % 3]} | status=delivered | "
             f"weight={i % 40 + 1}kg | route=warehouse-{i % 9}-to-hub-{i % 5} | ref=RX{i:05d}" for i in range(300)]
    return "\n".join(lines)


TOOLS: dict[str, tuple[Callable[[str], str], str, str]] = {
    # name: (the function, its one parameter, what the parameter is)
    "get_weather": (get_weather, "city", "the city's name"),
    "get_population": (get_population, "city", "the city's name"),
    "exchange_rate": (exchange_rate, "pair", "the currency pair, e.g. EUR/USD"),
    "lookup_order": (lookup_order, "order_id", "the order's id, e.g. O-1000"),
    "carrier_phone": (carrier_phone, "carrier", "the carrier's name"),
    "export_orders": (export_orders, "month", "the month's name, e.g. January"),
}


def openai_tools() -> list[dict[str, object]]:
    """The tools as OpenAI function declarations."""
    return [{"type": "function", "function": {
        "name": name, "description": fn.__doc__ or "",
        "parameters": {"type": "object", "properties": {param: {"type": "string", "description": about}},
                       "required": [param]}}} for name, (fn, param, about) in TOOLS.items()]


# ------------------------------------------------------------------ tool-using questions

_PHONE = r"\b[A-Z][a-z]+: (?P<phone>\+\d[\d ]*\d)"  # a carrier_phone result line, never the tail's "UTC+0000"

QUESTIONS: tuple[QuestionTask, ...] = (
    QuestionTask("weather-today", (Turn(
        "What is the weather in Oslo today?",
        (Hop("get_weather", "city", r"weather in (?P<value>[A-Z][a-z]+) today", r"(?P<weather>[A-Z][a-z]+, -?\d+ C)"),),
        "In {city} today: {weather}."),), ("In Oslo today: Snow, -3 C.",), (("snow", "-3"),)),
    QuestionTask("population", (Turn(
        "How many people live in Lyon?",
        (Hop("get_population", "city", r"people live in (?P<value>[A-Z][a-z]+)\?",
             r"(?P<people>[\d,]+) inhabitants \((?P<source>[^)]+)\)"),),
        "{city} has {people} inhabitants ({source})."),), ("Lyon has 522,250 inhabitants (2021 census).",),
        (("522250",),)),
    QuestionTask("exchange-rate", (Turn(
        "What is the EUR/NOK exchange rate?",
        (Hop("exchange_rate", "pair", r"the (?P<value>[A-Z]{3}/[A-Z]{3}) exchange rate", r"= (?P<rate>[\d.]+) \("),),
        "One {pair} is {rate}."),), ("One EUR/NOK is 11.72.",), (("11.72",),)),
    QuestionTask("order-carrier-phone", (Turn(
        "Which carrier ships order O-4821, and what is its phone number?",
        (Hop("lookup_order", "order_id", r"ships order (?P<value>O-\d+)", r"carrier=(?P<shipper>\w+) status="),
         Hop("carrier_phone", "carrier", r"carrier=(?P<value>\w+) status=", _PHONE)),
        "Order {order_id} ships with {carrier}, phone {phone}."),),
        ("Order O-4821 ships with Dachser, phone +49 831 5916 0.",), (("dachser", "+4983159160"),)),
    QuestionTask("big-export", (
        Turn("In the March order export, which carrier ships order O-1234?",
             (Hop("export_orders", "month", r"the (?P<value>[A-Z][a-z]+) order export",
                  r"O-1234 \| carrier=(?P<found>\w+) \|"),),
             "Order O-1234 ships with {found}."),
        Turn("What is the phone number of that carrier?",
             (Hop("carrier_phone", "carrier", r"O-1234 ships with (?P<value>\w+)\.", _PHONE),),
             "{carrier} answers at {phone}.")),
        ("Order O-1234 ships with Kuehne.", "Kuehne answers at +41 44 786 9511."),
        (("kuehne",), ("+41447869511",)), big=True),
)

# ------------------------------------------------------------------ bug fixes (mini-swe-agent)


def _test(module: str, checks: str) -> str:
    return f"from {module} import *\n{checks}\nprint({TESTS_PASSED!r})\n"


BUGS: tuple[BugTask, ...] = (
    BugTask("add", "add() in calc.py returns the wrong sum: add(2, 3) should be 5. Fix calc.py; test_calc.py checks it.",
            {"calc.py": "def add(a, b):\n    return a - b\n", "test_calc.py": _test("calc", "assert add(2, 3) == 5")},
            "calc.py", "return a - b", "return a + b", "python test_calc.py"),
    BugTask("triple", "triple() in scale.py does not triple: triple(4) should be 12. Fix scale.py; test_scale.py checks it.",
            {"scale.py": "def triple(n):\n    return n * 2\n", "test_scale.py": _test("scale", "assert triple(4) == 12")},
            "scale.py", "return n * 2", "return n * 3", "python test_scale.py", silent_once=True),
    BugTask("even", "is_even() in parity.py is inverted: is_even(4) should be True. Fix parity.py; test_parity.py checks it.",
            {"parity.py": "def is_even(n):\n    if n % 2 == 1:\n        return True\n    return False\n",
             "test_parity.py": _test("parity", "assert is_even(4) and not is_even(3)")},
            "parity.py", "n % 2 == 1", "n % 2 == 0", "python test_parity.py"),
    BugTask("largest", "largest() in stats.py returns the smallest value: largest([3, 9, 4]) should be 9. Fix stats.py; "
            "test_stats.py checks it.",
            {"stats.py": "def largest(values):\n    best = min(values)\n    return best\n",
             "test_stats.py": _test("stats", "assert largest([3, 9, 4]) == 9")},
            "stats.py", "best = min(values)", "best = max(values)", "python test_stats.py"),
    BugTask("sum-to", "sum_to() in series.py stops one short: sum_to(4) should be 10. Fix series.py; test_series.py checks it.",
            {"series.py": "def sum_to(n):\n    return sum(range(1, n))\n",
             "test_series.py": _test("series", "assert sum_to(4) == 10")},
            "series.py", "range(1, n)", "range(1, n + 1)", "python test_series.py"),
)


def solves(task: QuestionTask | BugTask, ran: Any) -> bool:
    """Whether a run (``tests.fakes.agent_runs.Ran``) solved ``task`` in any words: a bug fix submitted with
    its tests passing; a question whose every answer holds its turn's ``keys`` (case, spaces and thousands
    separators aside), as a real model's answer is judged (the scripted upstream's are exact)."""
    if isinstance(task, BugTask):
        return bool(ran.solved)
    if len(ran.answers) != len(task.turns):
        return False
    return all(all(key.replace(",", "") in _plain(answer) for key in keys) for answer, keys in zip(ran.answers, task.keys, strict=True))


def _plain(text: str) -> str:
    return "".join(str(text).lower().split()).replace(",", "")


def scratch_repo(task: BugTask, root: Path) -> Path:
    """The task's files in a fresh folder under ``root``."""
    folder = root / task.name
    folder.mkdir(parents=True)
    for name, text in task.files.items():
        (folder / name).write_text(text)
    return folder


def tests_pass(task: BugTask, folder: Path) -> bool:
    """Whether the task's tests pass in ``folder`` (run as a child process)."""
    done = subprocess.run([sys.executable, *task.test.split()[1:]], cwd=folder, capture_output=True, text=True,
                          timeout=60, check=False)
    return done.returncode == 0 and TESTS_PASSED in done.stdout
