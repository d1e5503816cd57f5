"""Worker process for math answer checking (run as a script: ``python _math_worker.py``).

It imports only the standard library and math-verify (never mindrl or mindspore), reads one JSON
request per line on stdin and answers one JSON line on stdout:

    -> {"id": 7, "gold": ["$\\frac12$", "\\frac12"], "pred": ["\\boxed{0.5}"], "t": 1}
    <- {"id": 7, "ok": true}            (or {"id": 7, "ok": false, "err": "..."})

``gold`` and ``pred`` are a string or a list of alternative spellings, tried in order. A request may name
math-verify's extraction targets for each side, ``"gold_cfg": ["latex"], "pred_cfg": ["expr", "latex"]`` (in that
order; ``latex`` is ``LatexExtractionConfig()``, ``expr`` ``ExprExtractionConfig()``), as ``math_metric`` callers
do; without them ``parse``'s defaults apply.

The parent kills this process when an item overruns its deadline, which is the only reliable
way to stop sympy in the middle of a huge computation. Within that, math-verify's own
signal-based timeouts (this is the main thread of its own process, so they work) end most slow
cases cheaply without a restart. The first line written is {"ready": true} once imports are done.
"""
import json
import logging
import os
import sys


def main():
    # keep the protocol channel private: anything a library prints goes to stderr (discarded by
    # the parent), not into the replies
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    except Exception as e:  # report instead of dying silently: the parent shows this text
        out.write(json.dumps({"ready": False, "error": f"cannot import math_verify: {e!r}"}) + "\n")
        out.flush()
        return 1
    logging.disable(logging.WARNING)  # math-verify logs every timeout; the parent counts them instead
    # warm up the LaTeX parser and sympy (~0.2 s on first use), so that cost is part of start-up
    # and not charged to the first item's timeout
    verify(parse("$\\frac{1}{2}$"), parse("\\boxed{0.5}"))
    verify(parse("$x+1$"), parse("\\boxed{1+x}"))
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()

    targets = {"latex": LatexExtractionConfig, "expr": ExprExtractionConfig}

    def parse_first(candidates, t, cfg=None):
        # the parent sends alternative spellings (e.g. "$x+1$" then "x+1"): the first that parses wins
        kw = {"extraction_config": [targets[c]() for c in cfg]} if cfg else {}
        for text in [candidates] if isinstance(candidates, str) else candidates:
            got = parse(text, parsing_timeout=t, **kw)
            if got:
                return got
        return []

    gold_cache = {}  # n samples of a prompt share one label: parse it once
    for line in sys.stdin:
        req = json.loads(line)
        rid, t = req["id"], int(req.get("t") or 0)  # 0: math-verify's own timeouts off
        try:
            key = json.dumps([req["gold"], req.get("gold_cfg")])
            gold = gold_cache.get(key)
            if gold is None:
                gold = parse_first(req["gold"], t, req.get("gold_cfg"))
                if len(gold_cache) > 4096:
                    gold_cache.clear()
                gold_cache[key] = gold
            pred = parse_first(req["pred"], t, req.get("pred_cfg"))
            ok = bool(gold) and bool(pred) and bool(verify(gold, pred, timeout_seconds=t))
            reply = {"id": rid, "ok": ok}
        except BaseException as e:  # noqa: BLE001 - any failure is a wrong answer, never a dead worker
            if isinstance(e, KeyboardInterrupt):
                raise
            reply = {"id": rid, "ok": False, "err": repr(e)[:200]}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
