#!/usr/bin/env python3
"""The quality tasks of issue 12 in Python: an exact mirror of src/quality/qualityTasks.ts
and src/quality/qualityRandom.ts (same seed, same options -> byte-identical examples),
for scripts/train-quality-model.py. test/quality/qualityTasks.test.ts runs --dump and
compares it with the TypeScript generator, so change both together.

  /usr/bin/python3 scripts/quality_tasks.py --dump --seed 7 --count 8 [--family F]
      [--retrieval-bytes N] [--referrer-percent P] [--order original|annotated]
      [--dedup 0|1]

prints one JSON object a line (the QualityExample fields, in the same key order as
JSON.stringify of the TypeScript object).
"""

import argparse
import json
import sys

M32 = 0xFFFFFFFF

FAMILIES = ["lookup", "dependence", "retrieval", "order"]
ANSWER_END = "\n"
REFERENCE_MARK = "^"
VALUE_DIGITS = 3
RECORD_BYTES = 1 + VALUE_DIGITS + 1
RETRIEVAL_LINES_PER_DOCUMENT = 32
KEY_LETTERS = "ABCEFGHIJKLMNOQRSTUVWXYZ"  # all capitals but D and P (the annotation templates')
RETRIEVAL_MAX_RECORDS = len(KEY_LETTERS)
DEFAULT_RETRIEVAL_BYTES = 2048

# src/online/annotations.ts DEFAULT_TEMPLATES
PRIORITY_TEMPLATE = "Please read the context in the following priority order: {order} and answer the question."
DOC_TEMPLATE = "[Doc {n}]"
SEPARATOR = " > "
DEDUP_TEMPLATE = "Please refer to {doc} in the previous conversation."

SMALL_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def imul(a, b):
    return (a * b) & M32


def mulberry32(seed):
    state = seed & M32

    def next_u32():
        nonlocal state
        state = (state + 0x6D2B79F5) & M32
        t = imul(state ^ (state >> 15), state | 1)
        t = ((t + imul(t ^ (t >> 7), t | 61)) & M32) ^ t
        return (t ^ (t >> 14)) & M32

    return next_u32


def example_seed(seed, index):
    return mulberry32((seed ^ imul(index, 0x9E3779B1)) & M32)()


class QualityRandom:
    def __init__(self, seed):
        self._next = mulberry32(seed)

    def below(self, n):
        if n < 1:
            raise ValueError("below(%d): n must be a positive integer" % n)
        return self._next() % n

    def between(self, low, high):
        return low + self.below(high - low + 1)

    def chance(self, percent):
        return self.below(100) < percent

    def pick(self, items):
        return items[self.below(len(items))]

    def shuffled(self, items):
        out = list(items)
        for i in range(len(out) - 1, 0, -1):
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out


class FactSource:
    def __init__(self, random):
        self.random = random
        self.keys = set()
        self.values = set()

    def fact(self):
        while True:
            key = KEY_LETTERS[self.random.below(len(KEY_LETTERS))]
            if key not in self.keys:
                break
        self.keys.add(key)
        while True:
            value = str(self.random.below(10 ** VALUE_DIGITS)).rjust(VALUE_DIGITS, "0")
            if value not in self.values:
                break
        self.values.add(value)
        return (key, value)


def record(fact):
    return "%s%s\n" % fact


def question(key):
    return "?%s" % key


def doc_label(position):
    return DOC_TEMPLATE.replace("{n}", str(position + 1))


def priority_annotation(order):
    returned_at = [0] * len(order)
    for returned, original in enumerate(order):
        returned_at[original] = returned
    return PRIORITY_TEMPLATE.replace("{order}", SEPARATOR.join(doc_label(r) for r in returned_at))


def dedup_annotation(label):
    return DEDUP_TEMPLATE.replace("{doc}", label)


def finish(family, seed, documents, asked, facts, extra=None):
    q = question(asked[0])
    out = {
        "family": family,
        "seed": seed,
        "documents": documents,
        "question": q,
        "answer": asked[1],
        "prompt": "".join(documents) + q,
        "facts": [[k, v] for k, v in facts],
    }
    if extra:
        out.update(extra)
    return out


def lookup(seed):
    random = QualityRandom(seed)
    source = FactSource(random)
    documents, facts = [], []
    for _ in range(random.between(3, 6)):
        text = ""
        for _ in range(random.between(1, 3)):
            fact = source.fact()
            facts.append(fact)
            text += record(fact)
        documents.append(text)
    return finish("lookup", seed, documents, random.pick(facts), facts)


def dependence(seed, referrer_percent):
    random = QualityRandom(seed)
    source = FactSource(random)
    count = random.between(4, 8)
    own = [source.fact() for _ in range(count)]
    referrer = random.between(1, count - 1)
    facts = [(f[0], own[d - 1][1]) if d == referrer else f for d, f in enumerate(own)]
    documents = [("%s%s\n" % (f[0], REFERENCE_MARK * VALUE_DIGITS)) if d == referrer else record(f) for d, f in enumerate(own)]
    while True:
        warm = random.shuffled(list(range(count)))
        at = warm.index(referrer)
        if not (at == 0 or warm[at - 1] == referrer - 1):
            break
    asks_referrer = random.chance(referrer_percent)
    if asks_referrer:
        asked = facts[referrer]
    else:
        asked = random.pick([f for d, f in enumerate(facts) if d != referrer])
    extra = {"referrer": referrer}
    if asks_referrer:
        extra["stale"] = own[warm[at - 1]][1]
    extra["warmOrder"] = warm
    return finish("dependence", seed, documents, asked, facts, extra)


def retrieval(seed, nbytes):
    random = QualityRandom(seed)
    source = FactSource(random)
    lines = nbytes // RECORD_BYTES
    if lines < 1:
        raise ValueError("retrievalBytes %d holds no %d-byte line" % (nbytes, RECORD_BYTES))
    records = min(lines, RETRIEVAL_MAX_RECORDS)
    is_record = [False] * lines
    for line in random.shuffled(list(range(lines)))[:records]:
        is_record[line] = True
    facts, documents = [], []
    text = ""
    for line in range(lines):
        if is_record[line]:
            fact = source.fact()
            facts.append(fact)
            text += record(fact)
        else:
            for _ in range(RECORD_BYTES - 1):
                text += SMALL_LETTERS[random.below(26)]
            text += "\n"
        if (line + 1) % RETRIEVAL_LINES_PER_DOCUMENT == 0 or line == lines - 1:
            documents.append(text)
            text = ""
    return finish("retrieval", seed, documents, random.pick(facts), facts)


def order(seed, variant, dedup):
    random = QualityRandom(seed)
    source = FactSource(random)

    def draw_document():
        return [source.fact() for _ in range(random.between(1, 2))]

    first_count = random.between(2, 3)
    first = [draw_document() for _ in range(first_count)]
    earlier = random.pick([f for doc in first for f in doc])
    repeated_count = random.between(1, first_count - 1)
    repeated = sorted(random.shuffled(list(range(first_count)))[:repeated_count])
    fresh_count = random.between(1, 2)
    fresh = [draw_document() for _ in range(fresh_count)]
    relevance = random.shuffled(repeated + [first_count + i for i in range(fresh_count)])

    def facts_of(i):
        return first[i] if i < first_count else fresh[i - first_count]

    asked = random.pick(random.pick([facts_of(i) for i in relevance]))

    def body(facts):
        return "".join(record(f) for f in facts)

    documents = ["%s\n%s" % (doc_label(d), body(facts)) for d, facts in enumerate(first)]
    documents.append("%s%s\n" % (question(earlier[0]), earlier[1]))
    sent = sorted(relevance) if variant == "annotated" else relevance
    if variant == "annotated":
        documents.append(priority_annotation([relevance.index(i) for i in sent]) + "\n")
    for position, i in enumerate(sent):
        label = doc_label(position)
        if i < first_count and dedup:
            documents.append("%s\n%s\n" % (label, dedup_annotation(doc_label(i))))
        else:
            documents.append("%s\n%s" % (label, body(facts_of(i))))
    facts = [f for doc in first for f in doc] + [f for i in sent if i >= first_count for f in fresh[i - first_count]]
    return finish("order", seed, documents, asked, facts, {"order": variant, "dedup": dedup})


def quality_example(family, seed, retrieval_bytes=DEFAULT_RETRIEVAL_BYTES, referrer_percent=100, order_variant="annotated", dedup=True):
    seed &= M32
    if family == "lookup":
        return lookup(seed)
    if family == "dependence":
        return dependence(seed, referrer_percent)
    if family == "retrieval":
        return retrieval(seed, retrieval_bytes)
    if family == "order":
        return order(seed, order_variant, dedup)
    raise ValueError("unknown family %r" % family)


def quality_examples(seed, count, families=FAMILIES, **options):
    return [quality_example(families[i % len(families)], example_seed(seed, i), **options) for i in range(count)]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dump", action="store_true", help="print examples as JSON lines")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--family", choices=FAMILIES, action="append", help="families in rotation (default: all four)")
    parser.add_argument("--retrieval-bytes", type=int, default=DEFAULT_RETRIEVAL_BYTES)
    parser.add_argument("--referrer-percent", type=int, default=100)
    parser.add_argument("--order", choices=["original", "annotated"], default="annotated")
    parser.add_argument("--dedup", type=int, choices=[0, 1], default=1)
    args = parser.parse_args(argv)
    if not args.dump:
        parser.error("nothing to do: give --dump")
    examples = quality_examples(
        args.seed,
        args.count,
        args.family or FAMILIES,
        retrieval_bytes=args.retrieval_bytes,
        referrer_percent=args.referrer_percent,
        order_variant=args.order,
        dedup=bool(args.dedup),
    )
    out = sys.stdout
    for example in examples:
        out.write(json.dumps(example, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
