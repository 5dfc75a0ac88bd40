"""CodeExec-v0 tasks: seeded questions over generated data, each needing a short program to answer.

Task ``i`` of family ``f`` comes from its own ``random.Random(f"{f}:{i}")``, so it depends on its index only:

* ``table``: ``orders.csv``, 40-200 generated orders (date, customer, region, product, quantity, unit price);
  revenue of a region in a month, the product with the highest mean quantity, counts under conditions, the top
  region of a quarter, a customer's average order value, distinct customers of a product.
* ``logs``: ``access.log``, 200-500 lines of a generated web server log (common log format plus a latency field);
  5xx responses of a path, the busiest client IP or hour, a median latency, an error rate, bytes served, distinct
  IPs that got errors, the slowest path.
* ``numbers``: number puzzles without files: the sum of the primes below N, integers of a range with a given
  digit sum, a term of a linear recurrence mod m, the longest Collatz chain, a gcd sum, divisibility by exactly one
  of three numbers, the digit sum of a power.

Each task is a dict: ``family``, ``index``, ``task_id``, ``template``, ``question`` (the user's message),
``files`` (``{name: text}`` for the program's working directory), ``answer`` (``int``, ``float`` rounded to
``decimals``, or ``str``), ``answer_kind`` (``"int"``, ``"float"``, ``"str"``), ``decimals`` and ``exact`` (the
unrounded value; both ``None`` unless the kind is ``float``) and ``solution``: a stand-alone program that reads the
files and prints ``answer_text(task)``. The answer is computed here from the generated records in plain Python,
never by running ``solution`` (which parses the rendered files, often by another method), so the two check each
other. Float questions never sit within 1e-6 of a rounding boundary, so any sound computation rounds the same way.

>>> task = make_task("numbers", 20)
>>> task["task_id"], task["template"], task["answer_kind"], task["files"]
('numbers/20', 'digit_sum_power', 'int', {})
>>> task["question"]
'What is the sum of the decimal digits of 69^545? Answer with an integer.'
>>> check_answer(task, answer_text(task)), check_answer(task, "0")
(True, False)
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import random
import re
import statistics
import textwrap
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from agentgym.grading.answers import extract_answer
from agentgym.grading.facts import parse_number, parse_time

FAMILIES = ("table", "logs", "numbers")
#: Tasks per family (indices ``0 .. TASKS_PER_FAMILY - 1``).
TASKS_PER_FAMILY = 10_000
ANSWER_KINDS = ("int", "float", "str")
#: Slack of a float answer besides half a unit of its last decimal place: relative, for float noise.
FLOAT_RTOL = 1e-9

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")  # fmt: skip
REGIONS = ("North", "South", "East", "West", "Central")
PRODUCTS = ("Widget", "Gadget", "Sprocket", "Gizmo", "Flange", "Bracket", "Valve", "Gear", "Hinge", "Lamp", "Cable",
            "Pulley")  # fmt: skip
MONTH_ABBR = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True)
class Question:
    """What a template produces: the question text, the exact answer and the reference solution.

    ``answer`` is an ``int``, a ``str`` or, for ``kind == "float"``, the exact ``Fraction`` to round to
    ``decimals`` places.
    """

    template: str
    text: str
    answer: int | str | Fraction
    kind: str
    solution: str
    decimals: int | None = None


Template = Callable[[random.Random, Any], "Question | None"]


def _program(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


def _round_text(value: Fraction, decimals: int) -> str:
    """``value`` rounded half away from zero to ``decimals`` places, as text.

    >>> _round_text(Fraction(-1, 8), 2), _round_text(Fraction(7, 3), 0)
    ('-0.13', '2')
    """
    scaled = abs(value) * 10**decimals
    n = math.floor(scaled + Fraction(1, 2))
    sign = "-" if value < 0 and n else ""
    whole, frac = divmod(n, 10**decimals)
    return f"{sign}{whole}" + (f".{frac:0{decimals}d}" if decimals else "")


def _near_boundary(value: Fraction, decimals: int, margin: float = 1e-6) -> bool:
    """Whether ``value`` lies within ``margin`` units of its last decimal place of a rounding tie."""
    frac = (value * 10**decimals) % 1
    return abs(frac - Fraction(1, 2)) < margin


def _format_hint(kind: str, decimals: int | None = None) -> str:
    if kind == "int":
        return "Answer with an integer."
    return f"Answer with a number rounded to {decimals} decimal places."


# -- table: orders.csv --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Order:
    """One generated order; ``cents`` is the unit price in cents (prices are exact)."""

    order_id: int
    date: str
    customer: str
    region: str
    product: str
    quantity: int
    cents: int

    @property
    def month(self) -> int:
        return int(self.date[5:7])

    @property
    def revenue(self) -> int:
        """Quantity times unit price, in cents."""
        return self.quantity * self.cents


@dataclass(frozen=True)
class Orders:
    year: int
    rows: tuple[Order, ...]

    def csv(self) -> str:
        lines = ["order_id,date,customer,region,product,quantity,unit_price"]
        for o in self.rows:
            price = f"{o.cents // 100}.{o.cents % 100:02d}"
            lines.append(f"{o.order_id},{o.date},{o.customer},{o.region},{o.product},{o.quantity},{price}")
        return "\n".join(lines) + "\n"


def make_orders(rng: random.Random) -> Orders:
    """40-200 orders of one year, sorted by date: 5-8 products with their own price and typical quantity."""
    year = rng.choice((2022, 2023, 2024))
    n = rng.randint(40, 200)
    products = rng.sample(PRODUCTS, rng.randint(5, 8))
    price = {p: rng.randint(300, 12_000) for p in products}
    mean_qty = {p: rng.randint(2, 14) for p in products}
    customers = [f"C{k}" for k in rng.sample(range(100, 1000), rng.randint(8, 30))]
    region_weights = [rng.uniform(0.5, 3.0) for _ in REGIONS]
    start = dt.date(year, 1, 1).toordinal()
    days = sorted(rng.randrange(365) for _ in range(n))
    rows = []
    for k, day in enumerate(days):
        product = rng.choice(products)
        qty = max(1, min(30, round(rng.gauss(mean_qty[product], mean_qty[product] / 2))))
        cents = round(price[product] * rng.uniform(0.85, 1.15))
        region = rng.choices(REGIONS, region_weights)[0]
        date = dt.date.fromordinal(start + day).isoformat()
        rows.append(Order(10_001 + k, date, rng.choice(customers), region, product, qty, cents))
    return Orders(year, tuple(rows))


TABLE_INTRO = (
    "The file orders.csv in the working directory lists {n} orders of {year}, one per line after a header row, with "
    "the columns order_id, date (YYYY-MM-DD), customer, region, product, quantity and unit_price."
)


def t_revenue_region_month(rng: random.Random, data: Orders) -> Question:
    pick = rng.choice(data.rows)
    region, month = pick.region, pick.month
    cents = sum(o.revenue for o in data.rows if o.region == region and o.month == month)
    prefix = f"{data.year}-{month:02d}"
    text = (f"What was the total revenue (quantity × unit_price, summed over the orders) of the {region} region in "
            f"{MONTHS[month - 1]} {data.year}? {_format_hint('float', 2)}")  # fmt: skip
    solution = f"""
        import csv

        total = 0.0
        with open("orders.csv", newline="") as f:
            for row in csv.DictReader(f):
                if row["region"] == {region!r} and row["date"].startswith({prefix!r}):
                    total += int(row["quantity"]) * float(row["unit_price"])
        print(f"{{total:.2f}}")
    """
    return Question("revenue_region_month", text, Fraction(cents, 100), "float", _program(solution), 2)


def t_top_mean_quantity(rng: random.Random, data: Orders) -> Question:
    region = rng.choice([None, *sorted({o.region for o in data.rows})])
    rows = [o for o in data.rows if region is None or o.region == region]
    totals: dict[str, list[int]] = defaultdict(list)
    for o in rows:
        totals[o.product].append(o.quantity)
    best = max(sorted(totals), key=lambda p: Fraction(sum(totals[p]), len(totals[p])))
    where = "" if region is None else f" among the orders of the {region} region"
    text = (f"Which product has the highest mean quantity per order{where}? If several tie, give the one that comes "
            "first alphabetically. Answer with the product name as written in the file.")  # fmt: skip
    condition = "True" if region is None else f'row["region"] == {region!r}'
    solution = f"""
        import csv
        from collections import defaultdict

        total, count = defaultdict(int), defaultdict(int)
        with open("orders.csv", newline="") as f:
            for row in csv.DictReader(f):
                if {condition}:
                    total[row["product"]] += int(row["quantity"])
                    count[row["product"]] += 1
        print(max(sorted(total), key=lambda p: total[p] / count[p]))
    """
    return Question("top_mean_quantity", text, best, "str", _program(solution))


def t_count_condition(rng: random.Random, data: Orders) -> Question:
    product = rng.choice(sorted({o.product for o in data.rows}))
    mine = [o for o in data.rows if o.product == product]
    min_qty = rng.choice(mine).quantity
    limit = max(1, round(rng.choice(mine).cents / 100 + rng.choice((-1, 1)) * rng.random() * 3))
    n = sum(1 for o in mine if o.quantity >= min_qty and o.cents < limit * 100)
    text = (f"How many orders of {product} have a quantity of at least {min_qty} and a unit price below "
            f"{limit}.00? {_format_hint('int')}")  # fmt: skip
    solution = f"""
        import csv

        n = 0
        with open("orders.csv", newline="") as f:
            for row in csv.DictReader(f):
                if row["product"] != {product!r}:
                    continue
                if int(row["quantity"]) >= {min_qty} and float(row["unit_price"]) < {limit}:
                    n += 1
        print(n)
    """
    return Question("count_condition", text, n, "int", _program(solution))


def t_top_region_quarter(rng: random.Random, data: Orders) -> Question:
    quarter = (rng.choice(data.rows).month - 1) // 3 + 1
    months = range(3 * quarter - 2, 3 * quarter + 1)
    revenue: Counter[str] = Counter()
    for o in data.rows:
        if o.month in months:
            revenue[o.region] += o.revenue
    best = max(sorted(revenue), key=revenue.__getitem__)
    text = (f"Which region had the highest total revenue (quantity × unit_price) in Q{quarter} {data.year} "
            f"({MONTHS[months[0] - 1]} to {MONTHS[months[-1] - 1]})? If several tie, give the one that comes first "
            "alphabetically. Answer with the region name as written in the file.")  # fmt: skip
    solution = f"""
        import csv
        from collections import Counter

        cents = Counter()
        with open("orders.csv", newline="") as f:
            for row in csv.DictReader(f):
                if {months[0]} <= int(row["date"][5:7]) <= {months[-1]}:
                    cents[row["region"]] += int(row["quantity"]) * round(float(row["unit_price"]) * 100)
        print(max(sorted(cents), key=cents.__getitem__))
    """
    return Question("top_region_quarter", text, best, "str", _program(solution))


def t_avg_order_value(rng: random.Random, data: Orders) -> Question | None:
    customers = sorted({o.customer for o in data.rows})
    rng.shuffle(customers)
    for customer in customers:
        values = [o.revenue for o in data.rows if o.customer == customer]
        exact = Fraction(sum(values), 100 * len(values))
        if _near_boundary(exact, 2):
            continue
        text = (f"What is the average value (quantity × unit_price) of the orders placed by customer {customer}? "
                f"{_format_hint('float', 2)}")  # fmt: skip
        solution = f"""
            import csv

            values = []
            with open("orders.csv", newline="") as f:
                for row in csv.DictReader(f):
                    if row["customer"] == {customer!r}:
                        values.append(int(row["quantity"]) * float(row["unit_price"]))
            print(f"{{sum(values) / len(values):.2f}}")
        """
        return Question("avg_order_value", text, exact, "float", _program(solution), 2)
    return None


def t_distinct_customers(rng: random.Random, data: Orders) -> Question:
    product = rng.choice(sorted({o.product for o in data.rows}))
    half = rng.choice((1, 2))
    months = range(1, 7) if half == 1 else range(7, 13)
    n = len({o.customer for o in data.rows if o.product == product and o.month in months})
    span = "first half of {y} (January to June)" if half == 1 else "second half of {y} (July to December)"
    text = (f"How many distinct customers ordered {product} in the {span.format(y=data.year)}? "
            f"{_format_hint('int')}")  # fmt: skip
    solution = f"""
        import csv

        customers = set()
        with open("orders.csv", newline="") as f:
            for row in csv.DictReader(f):
                if row["product"] == {product!r} and {months[0]} <= int(row["date"][5:7]) <= {months[-1]}:
                    customers.add(row["customer"])
        print(len(customers))
    """
    return Question("distinct_customers", text, n, "int", _program(solution))


# -- logs: access.log ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Endpoint:
    path: str
    methods: tuple[str, ...]
    kind: str  # "page", "api", "static", "admin"


ENDPOINTS = (
    Endpoint("/", ("GET",), "page"),
    Endpoint("/login", ("GET", "POST"), "page"),
    Endpoint("/logout", ("POST",), "page"),
    Endpoint("/api/users", ("GET", "POST"), "api"),
    Endpoint("/api/orders", ("GET", "POST"), "api"),
    Endpoint("/api/products", ("GET",), "api"),
    Endpoint("/api/cart", ("GET", "POST", "DELETE"), "api"),
    Endpoint("/api/search", ("GET",), "api"),
    Endpoint("/static/app.js", ("GET",), "static"),
    Endpoint("/static/style.css", ("GET",), "static"),
    Endpoint("/health", ("GET",), "page"),
    Endpoint("/admin", ("GET", "POST"), "admin"),
)
SEARCH_WORDS = ("lamp", "desk", "chair", "cable", "red", "blue", "sale", "gift", "oak", "steel")


@dataclass(frozen=True)
class Request:
    """One log line; ``second`` counts from midnight."""

    ip: str
    second: int
    method: str
    path: str
    query: str
    status: int
    size: int
    latency: int

    @property
    def hour(self) -> int:
        return self.second // 3600


@dataclass(frozen=True)
class AccessLog:
    date: dt.date
    rows: tuple[Request, ...]

    def text(self) -> str:
        day = f"{self.date.day:02d}/{MONTH_ABBR[self.date.month - 1]}/{self.date.year}"
        lines = []
        for r in self.rows:
            h, rest = divmod(r.second, 3600)
            stamp = f"{day}:{h:02d}:{rest // 60:02d}:{rest % 60:02d} +0000"
            lines.append(
                f'{r.ip} - - [{stamp}] "{r.method} {r.path}{r.query} HTTP/1.1" {r.status} {r.size} {r.latency}'
            )
        return "\n".join(lines) + "\n"


def _ip(rng: random.Random) -> str:
    net = rng.choice(("10.0.{}.{}", "192.168.{}.{}", "172.16.{}.{}", "203.0.113.{1}", "198.51.100.{1}"))
    return net.format(rng.randint(0, 9), rng.randint(2, 254))


def make_log(rng: random.Random) -> AccessLog:
    """200-500 requests of one day: 6-10 endpoints with their own latency and error rates, skewed client IPs and a
    daily traffic profile."""
    date = dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(366))
    n = rng.randint(200, 500)
    endpoints = rng.sample(ENDPOINTS, rng.randint(6, 10))
    weight = [rng.uniform(0.3, 3.0) for _ in endpoints]
    base = {e.path: rng.randint(5, 60) if e.kind == "static" else rng.randint(20, 400) for e in endpoints}
    rate5xx = {e.path: rng.choice((0.0, rng.uniform(0.01, 0.15))) for e in endpoints}
    rate404 = {e.path: rng.uniform(0.0, 0.08) for e in endpoints}
    ips: list[str] = []
    while len(ips) < rng.randint(6, 20):
        if (ip := _ip(rng)) not in ips:
            ips.append(ip)
    ip_weight = [rng.paretovariate(1.2) for _ in ips]
    peak = rng.randint(8, 20)
    hour_weight = [0.2 + 3.0 * math.exp(-(((h - peak) / 3.5) ** 2)) for h in range(24)]
    hours = rng.choices(range(24), hour_weight, k=n)
    seconds = sorted(h * 3600 + rng.randrange(3600) for h in hours)
    rows = []
    for second in seconds:
        e = rng.choices(endpoints, weight)[0]
        method = rng.choice(e.methods)
        query = ""
        if e.path == "/api/search":
            query = f"?q={rng.choice(SEARCH_WORDS)}&page={rng.randint(1, 5)}"
        elif e.path in ("/api/orders", "/api/users") and method == "GET" and rng.random() < 0.6:
            query = f"?id={rng.randint(1, 9999)}"
        elif e.path == "/api/products" and rng.random() < 0.4:
            query = f"?page={rng.randint(1, 20)}"
        r = rng.random()
        if r < rate5xx[e.path]:
            status = rng.choice((500, 502, 503, 504))
        elif r < rate5xx[e.path] + rate404[e.path]:
            status = 404
        elif e.kind == "admin" and rng.random() < 0.5:
            status = rng.choice((401, 403))
        elif e.kind == "static" and rng.random() < 0.3:
            status = 304
        elif method == "POST":
            status = rng.choice((200, 201))
        elif method == "DELETE":
            status = 204
        else:
            status = 200
        if status in (204, 304):
            size = 0
        elif status >= 400:
            size = rng.randint(100, 600)
        else:
            size = rng.randint(2_000, 90_000) if e.kind == "static" else rng.randint(150, 8_000)
        latency = max(1, round(base[e.path] * rng.lognormvariate(0.0, 0.5) * (3 if status >= 500 else 1)))
        rows.append(Request(rng.choices(ips, ip_weight)[0], second, method, e.path, query, status, size, latency))
    return AccessLog(date, tuple(rows))


LOGS_INTRO = (
    "The file access.log in the working directory is a web server log of {n} requests on {date}, one per line: "
    'client IP, two dashes, [dd/Mon/yyyy:HH:MM:SS +0000], "METHOD TARGET HTTP/1.1" (the target is the path plus any '
    "query string), the status code, the response size in bytes and the latency in milliseconds."
)

PARSE_LOG = """
    import re

    LINE = re.compile(r'(\\S+) - - \\[([^]]*)\\] "(\\S+) (\\S+) HTTP/[0-9.]+" (\\d+) (\\d+) (\\d+)')
    rows = []
    with open("access.log") as f:
        for line in f:
            ip, stamp, method, target, status, size, latency = LINE.match(line).groups()
            hour = int(stamp.split(":")[1])
            rows.append((ip, hour, method, target.split("?")[0], int(status), int(size), int(latency)))
"""


def _log_program(body: str) -> str:
    return _program(PARSE_LOG) + _program(body)


def t_count_5xx(rng: random.Random, data: AccessLog) -> Question:
    failing = sorted({r.path for r in data.rows if r.status >= 500})
    path = rng.choice(failing or sorted({r.path for r in data.rows}))
    n = sum(1 for r in data.rows if r.path == path and 500 <= r.status <= 599)
    text = (f"How many requests to the path {path} (with or without a query string) got a 5xx status (500-599)? "
            f"{_format_hint('int')}")  # fmt: skip
    body = f"print(sum(1 for r in rows if r[3] == {path!r} and 500 <= r[4] <= 599))"
    return Question("count_5xx", text, n, "int", _log_program(body))


def _unique_max(counts: Counter[Any]) -> Any | None:
    """The key with the largest count, or None when two keys share it."""
    top = counts.most_common(2)
    return top[0][0] if top and (len(top) == 1 or top[0][1] > top[1][1]) else None


def t_top_ip(rng: random.Random, data: AccessLog) -> Question | None:
    path = rng.choice([None, *sorted({r.path for r in data.rows})])
    best = _unique_max(Counter(r.ip for r in data.rows if path is None or r.path == path))
    if best is None:
        return None
    where = "" if path is None else f" to the path {path} (with or without a query string)"
    text = f"Which client IP address made the most requests{where}? Answer with the IP address."
    condition = "" if path is None else f" if r[3] == {path!r}"
    body = f"""
        from collections import Counter

        print(Counter(r[0] for r in rows{condition}).most_common(1)[0][0])
    """
    return Question("top_ip", text, best, "str", _log_program(body))


def t_median_latency(rng: random.Random, data: AccessLog) -> Question | None:
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for r in data.rows:
        groups[r.method, r.path].append(r.latency)
    options = sorted(k for k, v in groups.items() if len(v) >= 4)
    if not options:
        return None
    method, path = rng.choice(options)
    exact = Fraction(statistics.median(groups[method, path]))  # a median of ints: k or k + 1/2, never a tie at 1 place
    text = (f"What is the median latency (the last field, in milliseconds) of the {method} requests to the path "
            f"{path} (with or without a query string)? {_format_hint('float', 1)}")  # fmt: skip
    body = f"""
        import statistics

        print(f"{{statistics.median(r[6] for r in rows if r[2] == {method!r} and r[3] == {path!r}):.1f}}")
    """
    return Question("median_latency", text, exact, "float", _log_program(body), 1)


def t_error_rate_hour(rng: random.Random, data: AccessLog) -> Question | None:
    per_hour = Counter(r.hour for r in data.rows)
    hours = sorted(h for h, n in per_hour.items() if n >= 5)
    rng.shuffle(hours)
    for hour in hours:
        errors = sum(1 for r in data.rows if r.hour == hour and r.status >= 400)
        exact = Fraction(100 * errors, per_hour[hour])
        if _near_boundary(exact, 2):
            continue
        text = (f"What percentage of the requests made between {hour:02d}:00:00 and {hour:02d}:59:59 got a status "
                f"of 400 or higher? {_format_hint('float', 2)} (e.g. 12.5% is 12.50)")  # fmt: skip
        body = f"""
            hits = [r for r in rows if r[1] == {hour}]
            print(f"{{100 * sum(1 for r in hits if r[4] >= 400) / len(hits):.2f}}")
        """
        return Question("error_rate_hour", text, exact, "float", _log_program(body), 2)
    return None


def t_busiest_hour(rng: random.Random, data: AccessLog) -> Question | None:
    best = _unique_max(Counter(r.hour for r in data.rows))
    if best is None:
        return None
    text = ("During which hour of the day were the most requests made? Answer with the hour as an integer from 0 to "
            "23 (e.g. 14 for 14:00:00-14:59:59).")  # fmt: skip
    body = """
        from collections import Counter

        print(Counter(r[1] for r in rows).most_common(1)[0][0])
    """
    return Question("busiest_hour", text, best, "int", _log_program(body))


def t_bytes_ip(rng: random.Random, data: AccessLog) -> Question:
    ip = rng.choice(sorted({r.ip for r in data.rows}))
    total = sum(r.size for r in data.rows if r.ip == ip and 200 <= r.status <= 299)
    text = (f"How many bytes in total (the response size field) were sent in successful (2xx) responses to the "
            f"client {ip}? {_format_hint('int')}")  # fmt: skip
    body = f"print(sum(r[5] for r in rows if r[0] == {ip!r} and 200 <= r[4] <= 299))"
    return Question("bytes_ip", text, total, "int", _log_program(body))


def t_distinct_ips_error(rng: random.Random, data: AccessLog) -> Question:
    status_class = rng.choice((4, 5))
    n = len({r.ip for r in data.rows if r.status // 100 == status_class})
    text = (f"How many distinct client IPs got at least one {status_class}xx response "
            f"({status_class}00-{status_class}99)? {_format_hint('int')}")  # fmt: skip
    body = f"print(len({{r[0] for r in rows if r[4] // 100 == {status_class}}}))"
    return Question("distinct_ips_error", text, n, "int", _log_program(body))


def t_slowest_path(rng: random.Random, data: AccessLog) -> Question:
    latencies: dict[str, list[int]] = defaultdict(list)
    for r in data.rows:
        latencies[r.path].append(r.latency)
    best = max(sorted(latencies), key=lambda p: Fraction(sum(latencies[p]), len(latencies[p])))
    text = ("Which path (without its query string) has the highest mean latency? If several tie, give the one that "
            "comes first alphabetically. Answer with the path, e.g. /login.")  # fmt: skip
    body = """
        from collections import defaultdict

        latencies = defaultdict(list)
        for r in rows:
            latencies[r[3]].append(r[6])
        print(max(sorted(latencies), key=lambda p: sum(latencies[p]) / len(latencies[p])))
    """
    return Question("slowest_path", text, best, "str", _log_program(body))


# -- numbers ------------------------------------------------------------------------------------------------------
def prime_sum_below(n: int) -> int:
    """The sum of the primes below ``n`` (a sieve).

    >>> prime_sum_below(10)
    17
    """
    if n < 3:
        return 0
    sieve = bytearray([1]) * n
    sieve[0] = sieve[1] = 0
    for p in range(2, math.isqrt(n - 1) + 1):
        if sieve[p]:
            sieve[p * p :: p] = bytes(len(range(p * p, n, p)))
    return sum(itertools.compress(range(n), sieve))


def _digit_strings(length: int, total: int) -> int:
    """How many strings of ``length`` decimal digits have digit sum ``total`` (inclusion-exclusion)."""
    if total < 0:
        return 0
    if length == 0:
        return int(total == 0)
    return sum((-1) ** j * math.comb(length, j) * math.comb(total - 10 * j + length - 1, length - 1)
               for j in range(min(length, total // 10) + 1))  # fmt: skip


def count_digit_sum(upto: int, k: int) -> int:
    """How many integers in ``[0, upto]`` have digit sum ``k`` (a digit count, not a loop over the range).

    >>> count_digit_sum(100, 10), sum(1 for n in range(101) if sum(map(int, str(n))) == 10)
    (9, 9)
    """
    if upto < 0:
        return 0
    digits = list(map(int, str(upto)))
    count = prefix = 0
    for i, d in enumerate(digits):
        count += sum(_digit_strings(len(digits) - i - 1, k - prefix - lower) for lower in range(d))
        prefix += d
    return count + int(prefix == k)


def recurrence_term(a0: int, a1: int, p: int, q: int, r: int, m: int, n: int) -> int:
    """``a_n`` of ``a_k = (p a_(k-1) + q a_(k-2) + r) mod m`` by 3x3 matrix powers (O(log n)).

    >>> recurrence_term(0, 1, 1, 1, 0, 1000, 10)  # Fibonacci
    55
    """
    if n == 0:
        return a0 % m

    def mul(x: list[list[int]], y: list[list[int]]) -> list[list[int]]:
        return [[sum(x[i][k] * y[k][j] for k in range(3)) % m for j in range(3)] for i in range(3)]

    result = [[int(i == j) for j in range(3)] for i in range(3)]
    step = [[p % m, q % m, r % m], [1, 0, 0], [0, 0, 1]]
    e = n - 1
    while e:
        if e & 1:
            result = mul(result, step)
        step = mul(step, step)
        e >>= 1
    return (result[0][0] * a1 + result[0][1] * a0 + result[0][2]) % m


def longest_collatz(limit: int) -> int:
    """The start in ``1..limit`` whose Collatz chain takes the most steps to reach 1 (the smallest on ties).

    >>> longest_collatz(10)
    9
    """
    steps = {1: 0}
    best, best_steps = 1, 0
    for start in range(2, limit + 1):
        path, n = [], start
        while n not in steps:
            path.append(n)
            n = n // 2 if n % 2 == 0 else 3 * n + 1
        s = steps[n]
        for v in reversed(path):
            s += 1
            steps[v] = s
        if steps[start] > best_steps:
            best, best_steps = start, steps[start]
    return best


def gcd_sum(n: int) -> int:
    """``sum(gcd(i, n) for i in 1..n)`` by Pillai's formula: the sum over divisors d of n of d * phi(n / d).

    >>> gcd_sum(12), sum(math.gcd(i, 12) for i in range(1, 13))
    (40, 40)
    """
    factors: Counter[int] = Counter()
    rest, p = n, 2
    while p * p <= rest:
        while rest % p == 0:
            factors[p] += 1
            rest //= p
        p += 1
    if rest > 1:
        factors[rest] += 1
    # Pillai's function is multiplicative: P(p^a) = (a + 1) p^a - a p^(a - 1)
    return math.prod((a + 1) * p**a - a * p ** (a - 1) for p, a in factors.items())


def count_exactly_one(n: int, divisors: Sequence[int]) -> int:
    """How many integers in ``1..n`` are divisible by exactly one of three ``divisors`` (inclusion-exclusion).

    >>> count_exactly_one(30, (2, 3, 5)), sum(1 for i in range(1, 31) if sum(i % d == 0 for d in (2, 3, 5)) == 1)
    (14, 14)
    """
    a, b, c = divisors
    singles = sum(n // d for d in (a, b, c))
    pairs = sum(n // math.lcm(x, y) for x, y in ((a, b), (a, c), (b, c)))
    return singles - 2 * pairs + 3 * (n // math.lcm(a, b, c))


def t_sum_primes(rng: random.Random, data: None) -> Question:
    n = rng.randint(10_000, 300_000)
    text = f"What is the sum of all prime numbers below {n}? {_format_hint('int')}"
    solution = f"""
        n = {n}
        sieve = bytearray([1]) * n
        sieve[0] = sieve[1] = 0
        for p in range(2, int(n ** 0.5) + 1):
            if sieve[p]:
                sieve[p * p :: p] = bytes(len(range(p * p, n, p)))
        print(sum(i for i in range(n) if sieve[i]))
    """
    return Question("sum_primes", text, prime_sum_below(n), "int", _program(solution))


def t_digit_sum_count(rng: random.Random, data: None) -> Question:
    low = rng.randint(0, 900_000)
    high = low + rng.randint(10_000, 50_000)
    k = sum(map(int, str(rng.randint(low, high))))
    n = count_digit_sum(high, k) - count_digit_sum(low - 1, k)
    text = f"How many integers from {low} to {high} (inclusive) have a decimal digit sum of {k}? {_format_hint('int')}"
    solution = f"print(sum(1 for n in range({low}, {high + 1}) if sum(map(int, str(n))) == {k}))"
    return Question("digit_sum_count", text, n, "int", _program(solution))


def t_recurrence(rng: random.Random, data: None) -> Question:
    m = rng.randint(1_000, 1_000_000_007)
    p, q, r = rng.randint(1, 99), rng.randint(1, 99), rng.randint(0, 99)
    a0, a1 = rng.randrange(m), rng.randrange(m)
    n = rng.randint(5_000, 100_000)
    text = (f"A sequence is defined by a_0 = {a0}, a_1 = {a1} and a_k = ({p}·a_(k-1) + {q}·a_(k-2) + {r}) mod {m} "
            f"for k ≥ 2. What is a_{n}? {_format_hint('int')}")  # fmt: skip
    solution = f"""
        a, b = {a0}, {a1}
        for _ in range({n - 1}):
            a, b = b, ({p} * b + {q} * a + {r}) % {m}
        print(b)
    """
    return Question("recurrence", text, recurrence_term(a0, a1, p, q, r, m, n), "int", _program(solution))


def t_collatz(rng: random.Random, data: None) -> Question:
    limit = rng.randint(2_000, 30_000)
    text = (f"Among the starting values 1, 2, ..., {limit}, which one takes the most steps to reach 1 in the Collatz "
            f"process (n → n / 2 if n is even, n → 3n + 1 if n is odd)? If several tie, give the smallest. "
            f"{_format_hint('int')}")  # fmt: skip
    solution = f"""
        from functools import cache


        @cache
        def steps(n):
            return 0 if n == 1 else 1 + steps(n // 2 if n % 2 == 0 else 3 * n + 1)


        print(max(range(1, {limit} + 1), key=steps))
    """
    return Question("collatz", text, longest_collatz(limit), "int", _program(solution))


def t_gcd_sum(rng: random.Random, data: None) -> Question:
    n = rng.randint(10_000, 200_000)
    text = f"What is the sum of gcd(i, {n}) over all integers i from 1 to {n}? {_format_hint('int')}"
    solution = f"""
        import math

        print(sum(math.gcd(i, {n}) for i in range(1, {n} + 1)))
    """
    return Question("gcd_sum", text, gcd_sum(n), "int", _program(solution))


def t_exactly_one(rng: random.Random, data: None) -> Question:
    n = rng.randint(20_000, 200_000)
    a, b, c = sorted(rng.sample(range(2, 40), 3))
    text = (f"How many integers from 1 to {n} are divisible by exactly one of {a}, {b} and {c}? "
            f"{_format_hint('int')}")  # fmt: skip
    solution = f"print(sum(1 for i in range(1, {n} + 1) if (i % {a} == 0) + (i % {b} == 0) + (i % {c} == 0) == 1))"
    return Question("exactly_one", text, count_exactly_one(n, (a, b, c)), "int", _program(solution))


def t_digit_sum_power(rng: random.Random, data: None) -> Question:
    base = rng.randint(2, 99)
    exponent = rng.randint(math.ceil(300 / math.log10(base)), math.floor(4000 / math.log10(base)))  # < 4300 digits
    text = f"What is the sum of the decimal digits of {base}^{exponent}? {_format_hint('int')}"
    solution = f"print(sum(int(d) for d in str({base} ** {exponent})))"
    return Question("digit_sum_power", text, sum(map(int, str(base**exponent))), "int", _program(solution))


TEMPLATES: dict[str, tuple[Template, ...]] = {
    "table": (t_revenue_region_month, t_top_mean_quantity, t_count_condition, t_top_region_quarter,
              t_avg_order_value, t_distinct_customers),
    "logs": (t_count_5xx, t_top_ip, t_median_latency, t_error_rate_hour, t_busiest_hour, t_bytes_ip,
             t_distinct_ips_error, t_slowest_path),
    "numbers": (t_sum_primes, t_digit_sum_count, t_recurrence, t_collatz, t_gcd_sum, t_exactly_one,
                t_digit_sum_power),
}  # fmt: skip


def template_names(family: str) -> list[str]:
    """The template names of a family, in order.

    >>> template_names("numbers")[:3]
    ['sum_primes', 'digit_sum_count', 'recurrence']
    """
    return [t.__name__.removeprefix("t_") for t in TEMPLATES[family]]


def make_task(family: str, index: int) -> dict[str, Any]:
    """Task ``index`` of ``family``, from ``random.Random(f"{family}:{index}")`` alone (see the module docstring).

    The template is drawn first; one that does not apply to the generated data (no unique maximum, no value clear
    of a rounding tie) hands over to the next one in order.
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    if not 0 <= index < TASKS_PER_FAMILY:
        raise ValueError(f"index must be in 0..{TASKS_PER_FAMILY - 1}, got {index}")
    rng = random.Random(f"{family}:{index}")
    templates = TEMPLATES[family]
    first = rng.randrange(len(templates))
    files: dict[str, str] = {}
    intro = ""
    data: Any = None
    if family == "table":
        data = make_orders(rng)
        files["orders.csv"] = data.csv()
        intro = TABLE_INTRO.format(n=len(data.rows), year=data.year) + "\n\n"
    elif family == "logs":
        data = make_log(rng)
        files["access.log"] = data.text()
        intro = LOGS_INTRO.format(n=len(data.rows), date=data.date.isoformat()) + "\n\n"
    for k in range(len(templates)):
        question = templates[(first + k) % len(templates)](rng, data)
        if question is not None:
            break
    else:  # pragma: no cover - every family has templates that always apply
        raise RuntimeError(f"no template applies to {family}:{index}")
    answer: int | float | str
    exact = None
    if question.kind == "float":
        assert isinstance(question.answer, Fraction) and question.decimals is not None
        answer, exact = float(_round_text(question.answer, question.decimals)), float(question.answer)
    else:
        assert not isinstance(question.answer, Fraction)
        answer = question.answer
    return {
        "family": family,
        "index": index,
        "task_id": f"{family}/{index}",
        "template": question.template,
        "question": intro + question.text,
        "files": files,
        "answer": answer,
        "answer_kind": question.kind,
        "decimals": question.decimals,
        "exact": exact,
        "solution": question.solution,
    }


def answer_text(task: dict[str, Any]) -> str:
    """The canonical text of a task's answer (what its ``solution`` prints, without the newline).

    >>> answer_text({"answer": 3.5, "answer_kind": "float", "decimals": 2})
    '3.50'
    """
    if task["answer_kind"] == "float":
        return f"{task['answer']:.{task['decimals']}f}"
    return str(task["answer"])


_NUMBER = re.compile(  # one separator style, in groups of three: "1,234,567", "1_000", "1 234"; "12,34" is no number
    r"[-+]?(?:\d{1,3}(?P<sep>[,_ \u202f\u00a0])\d{3}(?:(?P=sep)\d{3})*|\d+)(?:\.\d*)?(?:[eE][-+]?\d{1,3})?"
    r"|[-+]?\.\d+(?:[eE][-+]?\d{1,3})?"
)
_CURRENCY = re.compile(r"^(?:\$|us\$|usd|€|eur|£|gbp)\s*", re.IGNORECASE)
#: Words that may follow a number without changing it ("42 requests", "12.50%", "1,024 bytes").
_UNIT = re.compile(
    r"\s*(?:%|percent|per ?cent|dollars?|usd|euros?|bytes?|b|ms|milliseconds?|requests?|orders?|customers?|ips?|"
    r"ip addresses|integers?|steps?|items?|units?|times?|in total|total)$",
    re.IGNORECASE,
)
#: Templates whose integer answer is an hour of the day: "17", "17:00", "5 pm" and "17:00-17:59" all say 17.
HOUR_TEMPLATES = frozenset({"busiest_hour"})
_HOUR_LEAD_IN = re.compile(r"^(?:the\s+)?(?:busiest\s+)?(?:hour(?:\s+of\s+the\s+day)?\s*(?:is|was|:)?\s+)?",
                           re.IGNORECASE)  # fmt: skip
_RANGE = re.compile(r"^(?:between\s+|from\s+)?(.+?)\s*(?:-|–|—|to|until|and)\s*(.+)$", re.IGNORECASE)


def _number(text: str) -> Fraction | None:
    """The number the answer ``text`` gives (see ``agentgym.grading.answers.extract_answer`` for the wrapping allowed:
    a sentence, bold, a code fence), or None: digits with or without thousands separators (in groups of three),
    trailing zeros or an exponent, a currency sign and a unit after it (``$``, ``%``, ``bytes``), or a number word.

    >>> [_number(t) for t in ("**3,464,999,702**", "The answer is 1234.", "$12.50", "twelve", "12,34", "1e999999")]
    [Fraction(3464999702, 1), Fraction(1234, 1), Fraction(25, 2), Fraction(12, 1), None, None]
    """
    answer = extract_answer(text)
    cleaned = _UNIT.sub("", _CURRENCY.sub("", answer)).strip()
    if len(cleaned) > 200:  # (ints past 4,300 digits do not parse)
        return None
    if _NUMBER.fullmatch(cleaned):
        return Fraction(re.sub(r"[,_ \u202f\u00a0]", "", cleaned))
    word = parse_number(cleaned)
    return Fraction(word) if word is not None and word.is_finite() else None


def _hour(text: str) -> int | None:
    """The hour of the day the answer ``text`` gives as a time: ``17:00``, ``5 pm``, ``17:00:00``, or a range of
    that hour (``17:00-17:59``, ``17:00 to 18:00``); None for anything else (``5 o'clock`` does not say which 5).

    >>> [_hour(t) for t in ("17:00", "**5 pm**", "17:00:00-17:59:59", "from 17:00 to 18:00", "5 o'clock", "17:30")]
    [17, 17, 17, 17, None, None]
    """
    answer = _HOUR_LEAD_IN.sub("", extract_answer(text))
    answer = re.sub(r"\b(\d{1,2}:\d{2}):\d{2}\b", r"\1", answer)  # seconds do not matter here
    whole = parse_time(answer)
    if whole is not None:
        return whole.hour if whole.half_known and whole.minute == 0 else None
    if m := re.fullmatch(r"(\d{1,2})\s*h", answer, flags=re.IGNORECASE):
        return int(m.group(1)) if int(m.group(1)) < 24 else None
    if (m := _RANGE.match(answer)) is None:
        return None
    first, last = parse_time(m.group(1)), parse_time(m.group(2))
    if first is None or last is None or not (first.half_known and last.half_known) or first.minute:
        return None
    if (last.hour, last.minute) in ((first.hour, 59), ((first.hour + 1) % 24, 0)):
        return first.hour
    return None


def normalise_text(text: str) -> str:
    """A string answer for comparison: quotes, backticks, markdown, a lead-in ("The answer is"), a final period and
    case ignored, whitespace collapsed.

    >>> normalise_text(' "North". '), normalise_text("The answer is **/api/orders**.")
    ('north', '/api/orders')
    """
    cleaned = extract_answer(text).strip().strip("`'\"").strip().rstrip(".").strip().strip("`'\"")
    return " ".join(cleaned.split()).casefold()


#: What may stand around a name answer: "the North region", "product Widget", "IP 10.0.0.7", "path /login".
_NAME_NOUNS = re.compile(r"^(?:the\s+)?(?:(?:region|product|ip(?:\s+address)?|path|client)\s+)?(.+?)"
                         r"(?:\s+(?:region|product))?$")  # fmt: skip


def check_answer(task: dict[str, Any], submitted: str) -> bool:
    """Whether ``submitted`` (text) answers ``task``.

    The answer may be wrapped as people write it: a lead-in ("The answer is", "Answer:"), bold, inline code, a code
    fence, quotes, a final period (``agentgym.grading.answers.extract_answer``). ``int``: the same integer (``"1,234"``,
    ``"1234.0"``, ``"twelve"``, a unit after it; separators only in groups of three); an hour of the day
    (``HOUR_TEMPLATES``) also as a time of that hour (``"17:00"``, ``"5 pm"``, ``"17:00-17:59"``). ``float``: within
    half a unit of the requested last decimal place of the exact value, plus ``FLOAT_RTOL`` relative (so the
    correctly rounded answer and any more precise one match; ``$``, ``%`` and units are ignored). ``str``: equal after
    ``normalise_text`` ("the North region" names ``North``).

    >>> task = {"answer": 12.35, "answer_kind": "float", "decimals": 2, "exact": 12.3456}
    >>> [check_answer(task, s) for s in ("12.35", "12.3456", "$12.35", "12.34", "12.36", "twelve")]
    [True, True, True, False, False, False]
    """
    kind = task["answer_kind"]
    if kind == "str":
        said, gold = normalise_text(submitted), normalise_text(str(task["answer"]))
        bare = _NAME_NOUNS.fullmatch(said)
        return said == gold or (bare is not None and bare.group(1) == gold)
    hour = kind == "int" and task.get("template") in HOUR_TEMPLATES
    value = _number(_HOUR_LEAD_IN.sub("", extract_answer(submitted)) if hour else submitted)
    if value is None:
        return hour and _hour(submitted) == task["answer"]
    if kind == "int":
        return value == task["answer"]
    exact = Fraction(task["exact"])
    tolerance = Fraction(1, 2 * 10 ** task["decimals"]) + Fraction(FLOAT_RTOL) * max(1, abs(exact))
    return abs(value - exact) <= tolerance
