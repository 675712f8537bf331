"""Benchmark structured output: text deltas -> a partial object after every delta -> final object.

Run from the repository root::

    .venv/bin/python benchmarks/bench_structured.py            # full run (a few minutes)
    .venv/bin/python benchmarks/bench_structured.py --quick    # smoke run
    .venv/bin/python benchmarks/bench_structured.py --snapshots  # a snapshot per delta, N/4N

Method:

* The reply is a JSON ``Catalog`` (a title and a list of ``Product`` s, each with a sku, a
  name, a quantity, a price and a list of tags), exactly as a model answering with
  ``response_format=Catalog`` would stream it: the compact JSON cut into deltas of 10
  characters (about 10,000 deltas for 100 KB). Every contender gets the same list of deltas
  and must produce a partial object after every delta, then the final validated object.
* Contenders:

  - ``fluxstream``: :class:`fluxstream.structured.ObjectBuilder` ``feed(delta)`` (a typed,
    live ``Catalog`` partial) per delta, then ``finish()``.
  - ``openai-stream``: openai-python's own helper for ``chat.completions.stream(
    response_format=Catalog)``, ``openai.lib.streaming.chat.ChatCompletionStreamState``, fed
    the chunk objects (built before timing), reading ``message.parsed`` after each, then
    ``get_final_completion()``. It re-parses the accumulated content with
    ``jiter.from_json(..., partial_mode=True)`` on every chunk and hands out dicts.
  - ``openai-core``: only that re-parse (``jiter.from_json(bytes(acc), partial_mode=True)``
    per delta) plus the final ``model_validate_json``: openai's approach without its chunk
    bookkeeping, the fastest form of it.
  - ``instructor``: ``instructor.Partial[Catalog].model_from_chunks(deltas)`` (its partial
    streaming; re-parses the accumulated text per delta and builds ``Partial`` models).
  - ``pydantic-partial``: ``TypeAdapter(Catalog).validate_json(acc,
    experimental_allow_partial="trailing-strings")`` from scratch per delta (a delta whose
    last item is missing a required field raises; that is counted, not an object).

* Sizes 10 KB, 100 KB and 1 MB for fluxstream (growth exponent = log(t_1MB / t_10KB) / log 100);
  the re-parsing contenders are quadratic, so they run at 10 KB and 100 KB only (1 MB would take
  hours) and their growth is reported from those two.
* Figures are medians of ``--repeats`` runs of CPU time (``time.process_time``; all contenders
  are CPU-bound in this process), with the garbage collector enabled as in real use; a
  contender whose first run takes more than ``SLOW`` seconds is run once.

``--snapshots`` measures instead what a frozen partial object after every delta costs, at N
and 4N items (``--items N``, default 800: a ``Points`` list of ``{"x": ..., "y": ...}``, about
17 KB at 800, in deltas of 10 characters): ``feed`` alone, ``feed`` + ``snapshot()`` (copies
only the containers still open) and ``feed`` + ``copy.deepcopy(value)`` (what ``snapshot()``
did before: a copy of the whole object per delta, quadratic), with the 4N / N time ratio of
each (4 is linear, 16 quadratic).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout, if not installed

import jiter
import pydantic
from pydantic import BaseModel, TypeAdapter

from fluxstream.structured import ObjectBuilder


class Product(BaseModel):
    sku: str
    name: str
    quantity: int
    price: float
    tags: list[str]


class Catalog(BaseModel):
    title: str
    products: list[Product]


_WORDS = ["red", "blue", "large", "small", "oak", "steel", "chair", "table", "lamp", "desk",
          "soft", "café", "naïve", "ünïcode", "quote\"d", "back\\slash"]


def make_text(target: int) -> str:
    """Compact JSON of a catalog of about ``target`` characters (deterministic)."""
    rnd = random.Random(target)
    products: list[Product] = []
    size = 30
    while size < target:
        product = Product(
            sku=f"SKU-{len(products):06d}",
            name=" ".join(rnd.choice(_WORDS) for _ in range(rnd.randint(2, 5))),
            quantity=rnd.randint(0, 10_000),
            price=round(rnd.random() * 1000, 2),
            tags=[rnd.choice(_WORDS) for _ in range(rnd.randint(0, 3))],
        )
        products.append(product)
        size += len(product.model_dump_json()) + 1
    return Catalog(title="Spring catalog", products=products).model_dump_json()


def split(text: str, size: int = 10) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


# --------------------------------------------------------------------------- contenders


def run_fluxstream(deltas: list[str]) -> Any:
    builder: ObjectBuilder[Catalog] = ObjectBuilder(Catalog)
    feed = builder.feed
    for delta in deltas:
        feed(delta)
    return builder.finish().value


def openai_chunks(deltas: list[str]) -> list[Any]:
    from openai.types.chat import ChatCompletionChunk

    base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    chunks = [ChatCompletionChunk.model_validate({
        **base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
    for delta in deltas:
        chunks.append(ChatCompletionChunk.model_validate(
            {**base, "choices": [{"index": 0, "delta": {"content": delta}}]}))
    chunks.append(ChatCompletionChunk.model_validate(
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    return chunks


def run_openai_stream(chunks: list[Any]) -> Any:
    from openai.lib.streaming.chat import ChatCompletionStreamState

    state: Any = ChatCompletionStreamState(response_format=Catalog)
    for chunk in chunks:
        state.handle_chunk(chunk)
        state.current_completion_snapshot.choices[0].message.parsed  # noqa: B018
    return state.get_final_completion().choices[0].message.parsed


def run_openai_core(deltas: list[str]) -> Any:
    acc = ""
    for delta in deltas:
        acc += delta
        jiter.from_json(bytes(acc, "utf-8"), partial_mode=True)
    return Catalog.model_validate_json(acc)


def run_instructor(deltas: list[str]) -> Any:
    from instructor import Partial

    last = None
    for obj in Partial[Catalog].model_from_chunks(iter(deltas)):  # type: ignore[misc]
        last = obj
    return last


_ADAPTER = TypeAdapter(Catalog)
_partial_failures = [0]


def run_pydantic_partial(deltas: list[str]) -> Any:
    acc = ""
    validate = _ADAPTER.validate_json
    for delta in deltas:
        acc += delta
        try:
            validate(acc, experimental_allow_partial="trailing-strings")
        except pydantic.ValidationError:
            _partial_failures[0] += 1
    return Catalog.model_validate_json(acc)


# --------------------------------------------------------------------------- harness


#: A contender whose first run takes longer than this (CPU seconds) is not repeated: the
#: quadratic ones at 100 KB, where one run already settles the comparison.
SLOW = 20.0


def measure(fn: Callable[[Any], Any], arg: Any, repeats: int, expected: BaseModel) -> float:
    times: list[float] = []
    for _ in range(repeats):
        start = time.process_time()
        result = fn(arg)
        times.append(time.process_time() - start)
        if result != expected:
            raise AssertionError(f"{fn.__name__} produced a different final object")
        if times[0] > SLOW:
            break
    return statistics.median(times)


# --------------------------------------------------------------------------- snapshots


class Point(BaseModel):
    x: int
    y: int


class Points(BaseModel):
    points: list[Point]


def points_text(items: int) -> str:
    """``items`` points of one width (so 4x the items is 4x the text)."""
    return Points(points=[Point(x=100 + i % 900, y=999 - i % 900)
                          for i in range(items)]).model_dump_json()


def run_feed(deltas: list[str]) -> Any:
    builder: ObjectBuilder[Points] = ObjectBuilder(Points)
    for delta in deltas:
        builder.feed(delta)
    return builder.value


def run_snapshot(deltas: list[str]) -> Any:
    builder: ObjectBuilder[Points] = ObjectBuilder(Points)
    shot = None
    for delta in deltas:
        builder.feed(delta)
        shot = builder.snapshot()
    return shot


def run_deepcopy(deltas: list[str]) -> Any:
    builder: ObjectBuilder[Points] = ObjectBuilder(Points)
    shot = None
    for delta in deltas:
        builder.feed(delta)
        shot = copy.deepcopy(builder.value)
    return shot


def snapshot_growth(items: int, repeats: int) -> None:
    """The ``--snapshots`` table: each way at ``items`` and ``4 * items``, and the ratio."""
    contenders: list[tuple[str, Callable[[list[str]], Any]]] = [
        ("feed only", run_feed),
        ("feed + snapshot()", run_snapshot),
        ("feed + deepcopy (old snapshot)", run_deepcopy),
    ]
    sizes = [items, 4 * items]
    texts = {n: points_text(n) for n in sizes}
    print(f"python {platform.python_version()}, pydantic {pydantic.VERSION}, repeats {repeats} "
          "(median CPU seconds); a frozen partial object after every delta of 10 characters")
    for n in sizes:
        print(f"  {n:,} items: {len(texts[n].encode()):,} bytes, {len(split(texts[n])):,} deltas")
    print(f"\n  {'':<31} {sizes[0]:>9,} {sizes[1]:>9,}   ratio")
    for name, fn in contenders:
        seconds = []
        for n in sizes:
            text = texts[n]
            expected = Points.model_validate_json(text)
            seconds.append(measure(fn, split(text), repeats, expected))
        print(f"  {name:<31} {seconds[0]:9.4f} {seconds[1]:9.4f}   {seconds[1] / seconds[0]:5.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--snapshots", action="store_true",
                        help="only the snapshot-per-delta growth (N and 4N items)")
    parser.add_argument("--items", type=int, default=800, help="N for --snapshots")
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    if args.snapshots:
        snapshot_growth(200 if args.quick else args.items, repeats)
        return
    sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    others_max = 30_000 if args.quick else 100_000

    try:
        import instructor  # noqa: F401
        have_instructor = True
    except ImportError:
        have_instructor = False

    print(f"python {platform.python_version()}, pydantic {pydantic.VERSION}, "
          f"jiter {jiter.__version__}, repeats {repeats} (median CPU seconds)")
    results: dict[str, dict[int, float]] = {}
    info: dict[int, dict[str, int]] = {}
    for target in sizes:
        text = make_text(target)
        deltas = split(text)
        expected = Catalog.model_validate_json(text)
        info[target] = {"bytes": len(text.encode()), "deltas": len(deltas),
                        "products": len(expected.products)}
        print(f"\n{len(text.encode()):,} bytes, {len(deltas):,} deltas, "
              f"{len(expected.products):,} products")
        contenders: list[tuple[str, Callable[[Any], Any], Any]] = [
            ("fluxstream", run_fluxstream, deltas)]
        if target <= others_max:
            contenders += [
                ("openai-stream", run_openai_stream, openai_chunks(deltas)),
                ("openai-core", run_openai_core, deltas),
                ("pydantic-partial", run_pydantic_partial, deltas),
            ]
            if have_instructor:
                contenders.append(("instructor", run_instructor, deltas))
        for name, fn, arg in contenders:
            _partial_failures[0] = 0
            seconds = measure(fn, arg, repeats, expected)
            results.setdefault(name, {})[target] = seconds
            extra = ""
            if name == "pydantic-partial":
                extra = f"  ({_partial_failures[0] // repeats:,} deltas raised)"
            print(f"  {name:<17} {seconds:9.4f} s  {seconds / len(deltas) * 1e6:8.1f} us/delta"
                  f"{extra}")
        if target <= others_max:
            ours = results["fluxstream"][target]
            fastest = min((v[target], k) for k, v in results.items()
                          if k != "fluxstream" and target in v)
            print(f"  fluxstream is {fastest[0] / ours:.1f}x faster than the fastest other "
                  f"({fastest[1]})")

    print("\ngrowth exponents (log time ratio / log size ratio):")
    for name, by_size in results.items():
        known = sorted(by_size)
        if len(known) >= 2:
            lo, hi = known[0], known[-1]
            ratio = info[hi]["bytes"] / info[lo]["bytes"]
            exponent = math.log(by_size[hi] / by_size[lo]) / math.log(ratio)
            print(f"  {name:<17} {exponent:.2f}  ({info[lo]['bytes']:,} -> {info[hi]['bytes']:,} B)")
    if not have_instructor:
        print("\ninstructor is not installed: `pip install instructor` to include it "
              "(benchmark-only; it pins an older jiter)")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "sizes": info}, indent=1))


if __name__ == "__main__":
    main()
