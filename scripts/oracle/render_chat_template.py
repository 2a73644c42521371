#!/usr/bin/env python3
"""Renders a chat template with Python's jinja2 set up as Hugging Face transformers' apply_chat_template
sets it up (the reference a model's own template is written for): a sandboxed environment with
trim_blocks and lstrip_blocks, the loopcontrols extension, transformers' tojson (json.dumps,
ensure_ascii off, keys in their order), raise_exception and strftime_now (today's date).

stdin: {"template": TEXT, "cases": [{"messages": [...], "tools": [...]|null,
        "add_generation_prompt": bool, "kwargs": {...}}, ...]}
stdout: [{"text": RENDERED} | {"error": MESSAGE}, ...], one per case.

    /usr/bin/python3 scripts/oracle/render_chat_template.py < cases.json
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateRaised(Exception):
    pass


def raise_exception(message):
    raise TemplateRaised(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def main():
    request = json.load(sys.stdin)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    template = env.from_string(request["template"])
    out = []
    for case in request["cases"]:
        variables = {**case.get("kwargs", {}), "messages": case["messages"], "add_generation_prompt": case.get("add_generation_prompt", True)}
        if case.get("tools"):
            variables["tools"] = case["tools"]
        try:
            out.append({"text": template.render(**variables)})
        except (TemplateRaised, jinja2.TemplateError) as error:
            out.append({"error": str(error)})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
