"""Does a claim hold? Its rules (:mod:`testbed.spec.claimsfile`) judged on a results document
(:mod:`testbed.metrics.results`: the claim's trials or sweep).

Pure: :func:`judge` takes the claim and the document (or why there is none) and returns a verdict
dict, which ``reproduce.json`` stores and :mod:`testbed.report.reproduce` renders:

    {"id", "verdict": "yes" | "no" | "not runnable" | "invalid", "reason",
     "rules": [{"rule", "holds": True | False | None, "left": stats, "right": stats | None,
                "bound": the right-hand side's value, "reason"}],
     "terms": [{"term", "transport", "kpi", "point", "stats"}]}

with ``stats`` = ``{"median", "min", "max", "n"}`` over the trials. The medians are compared.
A claim is "invalid" when any run feeding one of its rules failed the fidelity check
(``validity.invalid`` of the transport at that point: the emulation was starved, so its
figures measure the machine, not the transport): it never holds on such runs. It is "not
runnable" when there are no results (with the reason) or a rule's KPI has no value; "no"
when a rule fails; "yes" when every rule holds.
"""

from __future__ import annotations

from testbed.spec.claimsfile import Claim, Rule, Term

YES, NO, NOT_RUNNABLE, INVALID = "yes", "no", "not runnable", "invalid"
VERDICTS = (YES, NO, NOT_RUNNABLE, INVALID)


def point_texts(doc: dict) -> list[str]:
    """Each point's swept values as written (from its label ``key=value, ...``), joined by ','."""
    return [_texts(p) for p in doc.get("points") or ()]


def _texts(p: dict) -> str:
    label = p.get("label") or ""
    return ",".join(part.split("=", 1)[1] if "=" in part else part for part in label.split(", ")) if label else ""


def find_point(doc: dict, point: str | None) -> dict | None:
    """The point a term names: a sweep's point by its values' text, else the only point."""
    points = doc.get("points") or []
    if point is None:
        return points[0] if doc.get("kind") != "sweep" and points else None
    return next((p for p in points if _texts(p) == point or (p.get("label") or "").replace(" ", "") == point),
                None)


def term_stats(doc: dict, term: Term) -> tuple[dict | None, dict | None]:
    """(the KPI's stats, the transport's validity) of a term; None where missing."""
    p = find_point(doc, term.point)
    t = ((p or {}).get("transports") or {}).get(term.transport)
    if t is None:
        return None, None
    return t.get(term.kpi), t.get("validity")


def _compare(a: float, op: str, b: float) -> bool:
    return {">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[op]


def judge_rule(rule: Rule, doc: dict) -> dict:
    """One rule on one document: ``{"rule", "holds", "left", "right", "bound", "reason",
    "invalid"}`` (``holds`` None: not decidable, ``reason`` says why; ``invalid``: the
    fidelity check's reasons for runs feeding it)."""
    out = {"rule": rule.text, "holds": None, "left": None, "right": None, "bound": None, "reason": "",
           "invalid": []}
    missing = []
    for side, term in (("left", rule.left), ("right", rule.right)):
        if term is None:
            continue
        st, validity = term_stats(doc, term)
        out[side] = st
        if validity and validity.get("invalid"):
            out["invalid"] += [f"{term.transport}{' @' + term.point if term.point else ''}: {r}"
                               for r in validity.get("reasons") or ["invalid"]]
        if st is None:
            where = f" at {term.point}" if term.point else ""
            missing.append(f"{term.transport}{where}: not in the results")
        elif not st.get("n") or st.get("median") is None:
            missing.append(f"{term}: no value in any trial")
    if missing:
        out["reason"] = "; ".join(missing)
        return out
    left = out["left"]["median"]
    bound = rule.constant if rule.right is None else rule.factor * out["right"]["median"]
    out["bound"] = bound
    out["holds"] = _compare(left, rule.op, bound)
    return out


def judge(claim: Claim, doc: dict | None, not_run: str | None = None) -> dict:
    """A claim's verdict (module docstring). ``doc``: its results document; None with
    ``not_run`` saying why there is none (the scenario cannot run here, the runs failed)."""
    terms = list(dict.fromkeys(t for r in claim.rules for t in r.terms()))
    out = {"id": claim.id, "verdict": NOT_RUNNABLE, "reason": "", "rules": [], "terms": []}
    if doc is None:
        out["reason"] = not_run or "no results"
        return out
    out["terms"] = [{"term": str(t), "transport": t.transport, "kpi": t.kpi, "point": t.point,
                     "stats": term_stats(doc, t)[0]} for t in terms]
    rules = [judge_rule(r, doc) for r in claim.rules]
    out["rules"] = rules
    invalid = list(dict.fromkeys(x for r in rules for x in r["invalid"]))
    undecided = [r for r in rules if r["holds"] is None]
    if invalid:
        out["verdict"], out["reason"] = INVALID, "; ".join(invalid)
    elif undecided:
        out["verdict"], out["reason"] = NOT_RUNNABLE, "; ".join(r["reason"] for r in undecided)
    elif all(r["holds"] for r in rules):
        out["verdict"] = YES
    else:
        out["verdict"] = NO
        out["reason"] = "; ".join(f"{r['rule']}: {_num(r['left']['median'])} vs {_num(r['bound'])}"
                                  for r in rules if not r["holds"])
    return out


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"
