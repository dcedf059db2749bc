"""Does a claim hold? Its rules (:mod:`testbed.spec.claimsfile`) judged on a results document
(:mod:`testbed.metrics.results`: the claim's trials or sweep).

Pure: :func:`judge` takes the claim and the document (or why there is none) and returns a verdict
dict, which ``reproduce.json`` stores and :mod:`testbed.report.reproduce` renders:

    {"id", "verdict": "yes" | "no" | "unproven" | "not runnable" | "invalid", "reason", "rules_verdict",
     "rules": [{"rule", "holds": True | False | None, "left": stats, "right": stats | None,
                "bound": the right-hand side's value, "reason"}],
     "terms": [{"term", "transport", "kpi", "point", "stats"}],
     "control": None | {"removes", "set", "transports", "outcome", "verdict", "reason", "rules", "terms"}}

with ``stats`` = ``{"median", "min", "max", "n"}`` over the trials. The medians are compared.
A claim is "invalid" when any run feeding one of its rules failed the fidelity check
(``validity.invalid`` of the transport at that point: the emulation was starved, so its
figures measure the machine, not the transport): it never holds on such runs. It is "not
runnable" when there are no results (with the reason) or a rule's KPI has no value; "no"
when a rule fails; "yes" when every rule holds. A trial that ran the transport but gave no
value for a rule's KPI (``missing`` in its stats: e.g. ``detect_s`` null, no EV retired), or
that did not complete (``completion.incomplete``: a QP in ERR, a failed rank; its iteration
KPIs cover only what finished, though its flows' stalls run to the end of the run), makes the
rule fail: a missing value never drops out of a median.

A claim's control (``control:``, its scenario with the mechanism under test removed) is judged
by the same rules on the control's KPIs, its transports replacing the claim's same-named ones
(:func:`merge_control`); the verdict's ``control`` says "fails as it should" (the rules fail
on it), "passes: claim does not discriminate", "could not run" or "invalid". A claim whose
rules hold is "yes" only when its control fails; otherwise "unproven", with the reason (no
control, the control passes, could not run, or was invalid). ``rules_verdict`` keeps the
rules' own verdict.
"""

from __future__ import annotations

from testbed.spec.claimsfile import Claim, Rule, Term

import copy

YES, NO, UNPROVEN, NOT_RUNNABLE, INVALID = "yes", "no", "unproven", "not runnable", "invalid"
VERDICTS = (YES, NO, UNPROVEN, NOT_RUNNABLE, INVALID)
#: a control's outcomes
FAILS, PASSES, COULD_NOT_RUN, CONTROL_INVALID = ("fails as it should", "passes: claim does not discriminate",
                                                 "could not run", "invalid")


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


def _completion(doc: dict, term: Term) -> dict:
    """The term's transport's ``completion`` counts at its point ({} when absent)."""
    p = find_point(doc, term.point)
    return (((p or {}).get("transports") or {}).get(term.transport) or {}).get("completion") or {}


def _compare(a: float, op: str, b: float) -> bool:
    return {">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[op]


def judge_rule(rule: Rule, doc: dict) -> dict:
    """One rule on one document: ``{"rule", "holds", "left", "right", "bound", "reason",
    "invalid"}`` (``holds`` None: not decidable, ``reason`` says why; ``invalid``: the
    fidelity check's reasons for runs feeding it)."""
    out = {"rule": rule.text, "holds": None, "left": None, "right": None, "bound": None, "reason": "",
           "invalid": []}
    missing, absent = [], []
    for side, term in (("left", rule.left), ("right", rule.right)):
        if term is None:
            continue
        st, validity = term_stats(doc, term)
        out[side] = st
        done = _completion(doc, term)
        if done.get("incomplete"):     # its KPIs cover only what finished: not a value for the rule
            n = done["incomplete"] + (done.get("complete") or 0)
            absent.append(f"{term.transport}{' @' + term.point if term.point else ''}: did not complete "
                          f"{done['incomplete']} of {n} trials ({'; '.join(done.get('reasons') or ())})")
        if validity and validity.get("invalid"):
            out["invalid"] += [f"{term.transport}{' @' + term.point if term.point else ''}: {r}"
                               for r in validity.get("reasons") or ["invalid"]]
        if st is None:
            where = f" at {term.point}" if term.point else ""
            missing.append(f"{term.transport}{where}: not in the results")
        elif st.get("missing"):
            absent.append(f"{term}: no value in {st['missing']} of {st['missing'] + (st.get('n') or 0)} trials")
        elif not st.get("n") or st.get("median") is None:
            missing.append(f"{term}: no value in any trial")
    if missing:
        out["reason"] = "; ".join(missing)
        return out
    if absent:            # a trial without a value fails the rule: it does not drop out of a median
        out["holds"], out["reason"] = False, "; ".join(dict.fromkeys(absent))
        return out
    left = out["left"]["median"]
    bound = rule.constant if rule.right is None else rule.factor * out["right"]["median"]
    out["bound"] = bound
    out["holds"] = _compare(left, rule.op, bound)
    return out


def judge(claim: Claim, doc: dict | None, not_run: str | None = None, control_doc: dict | None = None,
          control_not_run: str | None = None) -> dict:
    """A claim's verdict with its control's (module docstring). ``doc``: its results document;
    None with ``not_run`` saying why there is none (the scenario cannot run here, the runs
    failed); ``control_doc`` / ``control_not_run`` the same for the control's runs."""
    out = judge_rules(claim, doc, not_run)
    out["rules_verdict"] = out["verdict"]
    ctl = judge_control(claim, doc, control_doc, control_not_run)
    out["control"] = ctl
    if out["verdict"] == YES and (ctl is None or ctl["outcome"] != FAILS):
        out["verdict"] = UNPROVEN
        out["reason"] = ("the rules hold, but no control shows they can fail" if ctl is None
                         else f"the rules hold, but the control {ctl['outcome']}"
                         + (f" ({ctl['reason']})" if ctl["reason"] and ctl["outcome"] != PASSES else ""))
    return out


def merge_control(doc: dict | None, control_doc: dict, transports, stand_in=()) -> dict:
    """The results the control is judged on: ``doc`` (the claim's) with, at every point, the
    ``transports`` the control ran (None: every transport of ``control_doc``) replaced by the
    control's (matched by point label; a transport the control lacks is removed, so a rule on
    it cannot be judged); ``stand_in`` pairs (claim's transport, transport the control ran in
    its place): the latter's results are the former's. Without ``doc``, ``control_doc`` alone."""
    stands_for = {run: name for name, run in stand_in}
    if stands_for:
        control_doc = {**control_doc, "points": [
            {**q, "transports": {stands_for.get(k, k): v for k, v in (q.get("transports") or {}).items()}}
            for q in control_doc.get("points") or []]}
    if doc is None:
        return control_doc
    out = copy.deepcopy(doc)
    ctl_points = control_doc.get("points") or []
    for p in out.get("points") or []:
        cp = (ctl_points[0] if len(ctl_points) == 1 and len(out["points"]) == 1
              else next((q for q in ctl_points if q.get("label") == p.get("label")), None))
        ctl_t = (cp or {}).get("transports") or {}
        names = list(transports) if transports is not None else list(ctl_t)
        for name in names:
            p["transports"].pop(name, None)
            if name in ctl_t:
                p["transports"][name] = copy.deepcopy(ctl_t[name])
    return out


def judge_control(claim: Claim, doc: dict | None, control_doc: dict | None,
                  control_not_run: str | None = None) -> dict | None:
    """The control's verdict: ``{"removes", "set", "transports", "outcome"`` (:data:`FAILS`,
    :data:`PASSES`, :data:`COULD_NOT_RUN`, :data:`CONTROL_INVALID`), ``"verdict"`` (the rules'
    on the merged results), ``"reason", "rules", "terms"}``; None without a control."""
    c = claim.control
    if c is None:
        return None
    head = {"removes": c.removes, "set": c.set_texts(), "transports": list(c.transports) if c.transports else None,
            **({"stand_in": dict(c.stand_in)} if c.stand_in else {})}
    if control_doc is None:
        return {**head, "outcome": COULD_NOT_RUN, "verdict": NOT_RUNNABLE,
                "reason": control_not_run or "no results", "rules": [], "terms": []}
    v = judge_rules(claim, merge_control(doc, control_doc, c.transports, c.stand_in))
    outcome = {NO: FAILS, YES: PASSES, INVALID: CONTROL_INVALID}.get(v["verdict"], COULD_NOT_RUN)
    return {**head, "outcome": outcome, "verdict": v["verdict"], "reason": v["reason"], "rules": v["rules"],
            "terms": v["terms"]}


def judge_rules(claim: Claim, doc: dict | None, not_run: str | None = None) -> dict:
    """A claim's rules alone on ``doc`` (no control): the verdict dict without ``control``."""
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
        out["reason"] = "; ".join(f"{r['rule']}: " + (r["reason"] if r["bound"] is None else
                                                    f"{_num(r['left']['median'])} vs {_num(r['bound'])}")
                                  for r in rules if not r["holds"])
    return out


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"
