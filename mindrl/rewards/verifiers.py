"""Rule-based verifiers: ``fn(response_text, label) -> float``, chosen by name from a registry.

mindrl's own names (``verifier_function`` in the config):

- ``math_acc`` (alias ``deepscaler_acc``): 1.0 when the final answer is mathematically equivalent to the label
  (math-verify), with a hard per-sample timeout.
- ``r1_format``: ``<think>...</think>`` followed by ``<answer>...</answer>`` or by a plain final answer.
- ``r1_strict_format``: exactly ``<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>``.
- ``last_number``: the last number in the response equals the label's number exactly.

MindSpeed-RL's names (``acc``, ``math_17k_acc``, ``acc_for_ppo``, ``base_acc``, ``math_verify_reward``,
``acc_for_dapo``, ``format``, ``strict_format``, ``step``) score as MindSpeed-RL's functions of those names do:
``mindspeed_verifiers.py``, registered when the ``mindrl.rewards`` package is imported (as it is before any of
its modules).

Every verifier, built-in or user's, is called one sample at a time in a reward worker process under
``verifier_timeout`` (``containment.py``). A built-in that needs math-verify carries ``prepare(response, label)``:
the sample's text work, run in the reward worker like any call, returning the verdict (a float) when the text
decides it, else a ``(gold, pred)`` pair that ``RewardComputer`` hands to its ``MathVerifyPool``
(``verify_prepared``).
"""
import re
from decimal import Decimal, InvalidOperation

VERIFIERS = {}
_BUILTIN = set()


def register_reward(name, aliases=(), _builtin=False):
    """Decorator registering ``fn(response, label) -> float`` as ``name`` (and ``aliases``).

    Use it in a ``custom_reward_file``. Re-registering a custom name replaces it; the built-in
    names cannot be replaced (pick another name).
    """

    def deco(fn):
        for n in (name, *aliases):
            if n in _BUILTIN and not _builtin:
                raise ValueError(f"{n!r} is a built-in verifier name; register your reward under another name")
            VERIFIERS[n] = fn
            if _builtin:
                _BUILTIN.add(n)
        return fn

    return deco


# other frameworks' verifier names with no equivalent here: name -> why, and what to use instead (each of
# MindSpeed-RL's names is provided now, so none is refused)
NOT_PROVIDED = {}


def valid_verifier_names():
    return sorted(VERIFIERS)


def is_builtin(name):
    """True for mindrl's own verifiers (and their aliases): they run in the calling process."""
    return name in _BUILTIN and VERIFIERS.get(name) is not None


def unknown_verifier_message(name, known=None):
    """Why ``name`` is not a verifier, with the valid names (``known``: the registry's by default)."""
    known = sorted(VERIFIERS if known is None else known)
    if name in NOT_PROVIDED:
        return f"{name!r} {NOT_PROVIDED[name]}; valid names: {', '.join(known)}"
    import difflib

    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"unknown verifier {name!r}{hint}; valid names: {', '.join(known)}, or a name registered by "
            f"rl_config.custom_reward_file")


def get_verifier(name):
    try:
        return VERIFIERS[name]
    except KeyError:
        raise ValueError(f"verifier_function: {unknown_verifier_message(name)}") from None


# ---------------------------------------------------------------------------------------------
# answer extraction

def last_boxed(text):
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with nested braces, else None."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0 or text[start:i].strip() not in ("\\boxed", "\\fbox"):
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None  # unbalanced: the answer was cut off


def extract_math_answer(response):
    """The part of a response to grade: inside the last ``<answer>`` block if there is one; there,
    the last ``\\boxed{}`` if any. Returns ``(text_for_math_verify, bare_answer_or_None)``; the
    bare answer is None when neither a box nor an answer tag was found (free text)."""
    region, tagged = response, False
    pos = 0
    while True:  # the last <answer>...</answer> pair, as re.findall pairs them, in linear time
        start = response.find("<answer>", pos)
        end = response.find("</answer>", start + 8) if start >= 0 else -1
        if end < 0:
            break
        region, tagged, pos = response[start + 8 : end], True, end + 9
    boxed = last_boxed(region)
    if boxed is not None:
        return "\\boxed{" + boxed + "}", boxed
    return region, (region if tagged else None)


def _spellings(text, bare_math):
    """Alternatives for math-verify: a bare answer ("1+x", "\\frac12") is only read as LaTeX
    inside math delimiters, so try it wrapped in ``$...$`` first, then as it is."""
    if bare_math and "$" not in text and "\\boxed" not in text:
        return ["$" + text + "$", text]
    return [text]


_INT = re.compile(r"-?\d+")


def _quick_math_verdict(bare, label):
    """Decide the obvious cases without the worker pool: identical strings are equal, two
    different integers are not. None means 'ask math-verify'."""
    if bare is None:
        return None
    a = re.sub(r"\s+", "", bare).strip("$")
    b = re.sub(r"\s+", "", label).strip("$")
    if b.startswith("\\boxed{") and b.endswith("}"):
        b = b[len("\\boxed{") : -1]
    if a and a == b:
        return 1.0
    if _INT.fullmatch(a) and _INT.fullmatch(b):  # Decimal: int() refuses more than 4300 digits
        return 1.0 if Decimal(a) == Decimal(b) else 0.0
    return None


def math_prepare(response, label):
    """``math_acc``'s text work on one sample: its verdict when the text decides it (1.0 or 0.0), else the
    ``(gold, pred)`` spellings for math-verify."""
    label = str(label).strip()
    pred, bare = extract_math_answer(response)
    quick = _quick_math_verdict(bare, label)
    if quick is not None:
        return quick
    if pred.strip() and label:
        return _spellings(label, True), _spellings(pred, bare is not None)
    return 0.0


def verify_prepared(prepared, pool=None):
    """Floats for ``prepare`` results: verdicts as they are, ``(gold, pred)`` pairs checked by ``pool`` (a
    ``MathVerifyPool``): 1.0 when equivalent, else 0.0. ``gold`` may instead be a dict ``{"gold": spellings,
    "scores": [right, wrong, cut], "gold_cfg": [...], "pred_cfg": [...]}`` (all but ``gold`` optional): the values
    for an equivalent answer, a different one and a check cut by the timeout (default 1, 0, 0), and math-verify's
    extraction targets for each side (``_math_worker.py``). A pair stays a JSON-able 2-tuple: that is what a reward
    worker can send back."""
    from .math_pool import default_pool

    out = list(prepared)
    todo = [i for i, p in enumerate(out) if isinstance(p, tuple)]
    if not todo:
        return out
    items, scores = [], []
    for i in todo:
        gold, pred = out[i]
        if isinstance(gold, dict):
            opts = {k: gold[k] for k in ("gold_cfg", "pred_cfg") if k in gold}
            items.append((gold["gold"], pred, opts) if opts else (gold["gold"], pred))
            scores.append(tuple(gold.get("scores", (1.0, 0.0, 0.0))))
        else:
            items.append((gold, pred))
            scores.append((1.0, 0.0, 0.0))
    for i, ok, (right, wrong, cut) in zip(todo, (pool or default_pool()).verify_batch_detail(items), scores):
        out[i] = right if ok else cut if ok is None else wrong
    return out


def math_score_batch(responses, labels, pool=None):
    """Batch form of ``math_acc`` in this process (list of floats); ``pool`` is a ``MathVerifyPool``."""
    return verify_prepared([math_prepare(r, lab) for r, lab in zip(responses, labels)], pool)


@register_reward("math_acc", aliases=("deepscaler_acc",), _builtin=True)
def math_acc(response, label):
    """1.0 if the final answer is equivalent to ``label`` (math-verify: ``\\frac12`` == ``0.5``)."""
    return math_score_batch([response], [label])[0]


math_acc.prepare = math_prepare


# ---------------------------------------------------------------------------------------------
# format


def _only_once(text, tag):
    return text.count(f"<{tag}>") == 1 and text.count(f"</{tag}>") == 1


@register_reward("r1_format", _builtin=True)
def r1_format_reward(response, label=None):
    """1.0 for ``<think>...</think>`` then either ``<answer>...</answer>`` (non-empty, nothing
    after it) or, R1 style, non-empty plain text; only whitespace around. Tags must not repeat."""
    text = response.strip()
    if not (text.startswith("<think>") and _only_once(text, "think")):
        return 0.0
    rest = text.split("</think>", 1)[1].strip()
    if not rest:
        return 0.0
    if "<answer>" in rest or "</answer>" in rest:
        # string tests, not a regex: `<answer>(.*\S.*)</answer>` backtracks in quadratic time on a long answer
        ok = (_only_once(rest, "answer") and rest.startswith("<answer>") and rest.endswith("</answer>")
              and rest[len("<answer>") : -len("</answer>")].strip())
        return 1.0 if ok else 0.0
    return 1.0


_STRICT = re.compile(r"<think>\n(.+?)\n</think>\n<answer>\n(.+?)\n</answer>", re.S)


@register_reward("r1_strict_format", _builtin=True)
def r1_strict_format_reward(response, label=None):
    """1.0 only for exactly ``<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>`` (outer
    whitespace ignored), each tag once."""
    text = response.strip()
    ok = _only_once(text, "think") and _only_once(text, "answer") and _STRICT.fullmatch(text)
    return 1.0 if ok else 0.0


# ---------------------------------------------------------------------------------------------
# last number

# a sign only when it is not a binary minus ("10-5" ends in 5, not -5); thousands separators
# only in proper groups of three ("1,234" is 1234, but "3,4" is two numbers)
_NUMBER = re.compile(r"(?:(?<![\w)\].])-)?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|(?<![\w.])-?\.\d+", re.ASCII)


def last_number(text):
    """The last number in ``text`` as an exact ``Decimal`` (commas removed), or None."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return Decimal(found[-1].replace(",", ""))
    except InvalidOperation:
        return None


@register_reward("last_number", _builtin=True)
def last_number_reward(response, label):
    """1.0 if the last number in the response equals the label's (last) number exactly
    (``145`` == ``145.0``, ``1,000`` == ``1000``)."""
    want = last_number(str(label))
    got = last_number(response)
    return 1.0 if want is not None and got is not None and got == want else 0.0


# ---------------------------------------------------------------------------------------------
# MindSpeed-RL's layout scans (strict_format's; mindspeed_verifiers.py)

def first_boxes(text, limit=2):
    """Starts of the first ``limit`` matches that ``re.findall`` finds for ``\\\\boxed\\{.*?\\}``: a ``\\boxed{``
    closed by a ``}`` on its line. In linear time: that lazy regex scans to the end of the line from every
    unclosed ``\\boxed{``, quadratic time (58 s for 40,000 of them)."""
    found, pos, close, newline, n = [], 0, -1, -1, len(text)
    while len(found) < limit:
        p = text.find("\\boxed{", pos)
        if p < 0:
            break
        q = p + 7
        if close < q:  # the next "}" and "\n" from q, found again only once q has passed them: linear in total
            close = text.find("}", q) % (n + 1)  # -1 (none) becomes n
        if newline < q:
            newline = text.find("\n", q) % (n + 1)
        if close == n:
            break
        if close < newline:
            found.append(p)
            pos = close + 1
        else:
            pos = p + 1
    return found


def r1_layout(response):
    """MindSpeed-RL's structure check (its ``_validate_response_structure``, ``strict_format``'s): ``<think>``,
    ``</think>``, ``<answer>``, one ``\\boxed{...}`` and ``</answer>`` exactly once each and in that order, the
    response starting with ``<think>`` and ending with ``</answer>``."""
    marks = [response.find(t) if response.count(t) == 1 else -1
             for t in ("<think>", "</think>", "<answer>")]
    boxes = first_boxes(response)
    marks.append(boxes[0] if len(boxes) == 1 else -1)
    marks.append(response.find("</answer>") if response.count("</answer>") == 1 else -1)
    return (min(marks) >= 0 and marks == sorted(marks) and response.startswith("<think>")
            and response.endswith("</answer>"))

