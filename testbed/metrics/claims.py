"""Does a claim hold? Its rules (:mod:`testbed.spec.claimsfile`) judged on a results document
(:mod:`testbed.metrics.results`: the claim's trials or sweep).

Pure: :func:`judge` takes the claim and the document (or why there is none) and returns a verdict
dict, which ``reproduce.json`` stores and :mod:`testbed.report.reproduce` renders:

    {"id", "verdict": one of VERDICTS, "reason", "rules_verdict", "trials": {"n", "of"},
     "rules": [{"rule", "holds": True | False | None, "left": stats, "right": stats | None,
                "bound": the right-hand side's value, "reason", "trials": {"n", "of"}}],
     "terms": [{"term", "transport", "kpi", "point", "stats", "trials": {"n", "of"}}],
     "control": None | {"removes", "set", "transports", "outcome", "verdict", "reason", "rules", "terms"}}

with ``stats`` = ``{"median", "min", "max", "n"}`` over the trials. The medians are compared.

No verdict over missing data. ``trials`` is how many trials counted of the ``of`` asked for (the
caller's ``trials``, else the document's ``inputs.trials``, else the trials that gave a summary):
a trial counts for a term when it gave a summary, ran the term's transport, passed the fidelity
check and, in a run of several jobs, every job completed valid (its ``jobs`` row). In order:

- "no" when a trial of a transport the rules name gave wrong results (``wrong`` > 0, any job);
- "invalid" when a run feeding a rule failed the fidelity check (``validity.invalid``: the
  emulation was starved, so its figures measure the machine, not the transport);
- "unproven" (reason ``n of N trials: ...``) when any term counted fewer trials than asked: a
  trial without a summary, a transport missing from a trial's summary, a job of several that
  did not complete or was invalid;
- "not runnable" when there are no results (with the reason) or a rule's KPI has no value;
- "no" when a rule fails, "yes" when every rule holds.

A trial that ran the transport but gave no value for a rule's KPI (``missing`` in its stats:
e.g. ``detect_s`` null, no EV retired), or whose (single) job did not complete
(``completion.incomplete``: a QP in ERR, a failed rank; its iteration KPIs cover only what
finished, though its flows' stalls run to the end of the run), makes the rule fail: a missing
value never drops out of a median.

A claim's control (``control:``, its scenario with the mechanism under test removed) is judged
by the same rules on the control's KPIs, its transports replacing the claim's same-named ones
(:func:`merge_control`). It *fails as it should* only when it ran complete and valid (every
trial asked for, every job complete, no QP in ERR, valid, right results: :func:`control_trouble`)
and a rule fails on it; it *passes* when every rule holds; otherwise it *could not run:
unproven* (crashed, timed out, a QP in ERR, invalid, no results), the reason says which. A
claim whose rules hold is "yes" only when its control fails as it should; "unproven" when it
has none or the control passes; "holds on its rules; control unproven" when the control could
not run. ``rules_verdict`` keeps the rules' own verdict.
"""

from __future__ import annotations

from testbed.spec.claimsfile import Claim, Rule, Term

import copy

YES, NO, UNPROVEN, NOT_RUNNABLE, INVALID = "yes", "no", "unproven", "not runnable", "invalid"
#: the rules hold, the control could not show they can fail
HOLDS_CONTROL_UNPROVEN = "holds on its rules; control unproven"
VERDICTS = (YES, NO, UNPROVEN, HOLDS_CONTROL_UNPROVEN, NOT_RUNNABLE, INVALID)
#: a control's outcomes (an invalid control is one that could not run)
FAILS, PASSES, COULD_NOT_RUN = "fails as it should", "passes: claim does not discriminate", "could not run: unproven"


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


def asked_trials(doc: dict | None, trials: int | None = None) -> int | None:
    """The trials asked for: ``trials``, else the document's ``inputs.trials`` (what ``testbed
    reproduce`` ran it with), else None (each point's own count of summaries stands for it)."""
    if trials:
        return trials
    inputs = (doc or {}).get("inputs")
    n = inputs.get("trials") if isinstance(inputs, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def _at(point_text: str | None) -> str:
    return f" @{point_text}" if point_text else ""


def _facts(t: dict) -> list[dict] | None:
    """Per-trial facts of a transport at a point (:func:`testbed.metrics.trials.trial_facts`),
    None in a document written before them."""
    facts = (t.get("completion") or {}).get("trials")
    return facts if isinstance(facts, list) else None


def term_trials(doc: dict, term: Term, asked: int | None = None) -> dict:
    """``{"n", "of", "short": [why trials do not count]}`` of a term: ``of`` the trials asked
    for (``asked``, else those of its point that gave a summary), ``n`` those that count
    (module docstring)."""
    where = f"{term.transport}{_at(term.point)}"
    p = find_point(doc, term.point)
    summaries = (p or {}).get("trials") or 0
    of = asked or summaries or max([q.get("trials") or 0 for q in doc.get("points") or ()] + [0])
    if p is None:
        return {"n": 0, "of": of, "short": [f"{where}: no trial gave a summary"]}
    t = (p.get("transports") or {}).get(term.transport)
    facts = _facts(t) if t is not None else None
    given = len(facts) if facts is not None else summaries    # a control's merged in: its own trials
    short = [f"{_at(term.point).strip()}{': ' if term.point else ''}{of - given} of {of} trials gave no "
             "summary"] if of > given else []
    if t is None:
        return {"n": 0, "of": of, "short": short + [f"{where}: not in {summaries} of {of} trials"]}
    n, why = _uncounted(where, t, given, of, term.kpi)
    return {"n": n, "of": of, "short": short + why}


def _uncounted(where: str, t: dict, summaries: int, of: int, kpi: str | None = None) -> tuple[int, list[str]]:
    """(how many of a point's ``summaries`` trials count for transport ``t``, why the others do
    not): not in the trial's summary, invalid, a job of several not complete or invalid. A
    document older than the per-trial facts: from ``kpi``'s counts (no jobs; (0, []) without)."""
    reasons = (t.get("validity") or {}).get("reasons") or ()
    why_invalid = f" ({'; '.join(reasons)})" if reasons else ""
    facts = _facts(t)
    if facts is None:
        if kpi is None:
            return 0, []
        st = t.get(kpi) or {}
        ran = min(summaries, (st.get("n") or 0) + (st.get("missing") or 0) + (st.get("no_dip") or 0))
        invalid = (t.get("validity") or {}).get("invalid") or 0
        short = [f"{where}: not in {summaries - ran} of {of} trials"] if summaries > ran else []
        return max(0, ran - invalid), short + ([f"{where}: invalid in {invalid} of {of} trials{why_invalid}"]
                                               if invalid else [])
    ran = [f for f in facts if f.get("ran")]
    short = [f"{where}: not in {len(facts) - len(ran)} of {of} trials"] if len(ran) < len(facts) else []
    n, invalid, undone, bad_jobs = 0, 0, {}, {}
    for f in ran:
        jobs = f.get("jobs") or ()
        for j in jobs:
            if j.get("complete") is False:
                undone.setdefault(j.get("job"), []).append(j.get("reason"))
            if j.get("valid") is False:
                bad_jobs[j.get("job")] = bad_jobs.get(j.get("job"), 0) + 1
        invalid += f.get("valid") is False
        n += not (f.get("valid") is False or any(j.get("complete") is False or j.get("valid") is False for j in jobs))
    if invalid:
        short.append(f"{where}: invalid in {invalid} of {of} trials{why_invalid}")
    for job, why in undone.items():
        text = "; ".join(dict.fromkeys(str(r) for r in why if r))
        short.append(f"{where}: job {job} did not complete in {len(why)} of {of} trials" + (f" ({text})" if text else ""))
    short += [f"{where}: job {job} invalid in {k} of {of} trials" for job, k in bad_jobs.items()]
    return n, short


def wrong_results(doc: dict, transports) -> list[str]:
    """One line per transport (of ``transports``) and point whose trials gave wrong results
    (``wrong`` > 0 in any job): ``mrc: wrong results in 1 of 3 trials (12 elements)``."""
    out = []
    sweep = doc.get("kind") == "sweep"
    for p in doc.get("points") or ():
        for name in transports:
            t = (p.get("transports") or {}).get(name)
            if t is None:
                continue
            where = f"{name}{_at(_texts(p) if sweep else None)}"
            facts = _facts(t)
            if facts is None:      # before the per-trial facts: the first job's counts
                worst = (t.get("wrong") or {}).get("max")
                if worst:
                    out.append(f"{where}: wrong results (up to {worst:g} elements in a trial)")
                continue
            ran = [f for f in facts if f.get("ran")]
            per = [sum(j.get("wrong") or 0 for j in f["jobs"]) if f.get("jobs") else f.get("wrong") or 0 for f in ran]
            bad = [w for w in per if w]
            if bad:
                out.append(f"{where}: wrong results in {len(bad)} of {len(ran)} trials ({sum(bad):g} elements)")
    return out


def control_trouble(claim: Claim, own: dict, transports, asked: int | None = None) -> list[str]:
    """Why the control's own runs (``own``: its results document, a stand-in's results under
    the name of the transport it stands for) cannot show that the rules fail; [] when every
    trial asked for ran complete and valid: every term of ``transports`` (those the control
    ran) counted every trial (:func:`term_trials`), and no trial of any transport at any point
    did not complete (any job), had a QP in ERR (``qp_errors`` > 0), failed the fidelity check
    or gave wrong results."""
    ran = set(transports)
    out = [x for r in claim.rules for t in r.terms() if t.transport in ran
           for x in term_trials(own, t, asked)["short"]]
    sweep = own.get("kind") == "sweep"
    for p in own.get("points") or ():
        summaries = p.get("trials") or 0
        for name, t in (p.get("transports") or {}).items():
            where = f"{name}{_at(_texts(p) if sweep else None)}"
            done = t.get("completion") or {}
            facts = _facts(t)
            if done.get("incomplete"):
                out.append(f"{where}: did not complete {done['incomplete']} of "
                           f"{done['incomplete'] + (done.get('complete') or 0)} trials "
                           f"({'; '.join(done.get('reasons') or ())})")
            if facts is None:      # before the per-trial facts: the counts
                if (t.get("qp_errors") or {}).get("max"):
                    out.append(f"{where}: a QP in ERR")
                val = t.get("validity") or {}
                if val.get("invalid"):
                    out.append(f"{where}: invalid in {val['invalid']} of {val['invalid'] + (val.get('valid') or 0)} "
                               f"trials ({'; '.join(val.get('reasons') or ['invalid'])})")
                continue
            trials = [f for f in facts if f.get("ran")]
            err = sum(1 for f in trials if f.get("qp_errors"))
            if err:
                out.append(f"{where}: a QP in ERR in {err} of {len(trials)} trials")
            out += _uncounted(where, t, summaries, asked or summaries)[1]
        out += wrong_results({**own, "points": [p]}, list(p.get("transports") or ()))
    return list(dict.fromkeys(out))


def _compare(a: float, op: str, b: float) -> bool:
    return {">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[op]


def judge_rule(rule: Rule, doc: dict, counts: dict | None = None) -> dict:
    """One rule on one document: ``{"rule", "holds", "left", "right", "bound", "reason",
    "invalid", "trials"}`` (``holds`` None: not decidable, ``reason`` says why; ``invalid``: the
    fidelity check's reasons for runs feeding it; ``trials``: ``{"n", "of"}``, the fewest that
    counted of its terms', from ``counts`` (:func:`term_trials` by term; computed when None))."""
    out = {"rule": rule.text, "holds": None, "left": None, "right": None, "bound": None, "reason": "",
           "invalid": [], "trials": None}
    counts = counts if counts is not None else {t: term_trials(doc, t) for t in rule.terms()}
    mine = [counts[t] for t in rule.terms() if t in counts]
    if mine:
        low = min(mine, key=lambda c: (c["n"] - c["of"], c["n"]))
        out["trials"] = {"n": low["n"], "of": low["of"]}
    missing, absent = [], []
    for side, term in (("left", rule.left), ("right", rule.right)):
        if term is None:
            continue
        st, validity = term_stats(doc, term)
        out[side] = st
        done = _completion(doc, term)
        if done.get("incomplete"):     # its KPIs cover only what finished: not a value for the rule
            n = done["incomplete"] + (done.get("complete") or 0)
            absent.append(f"{term.transport}{_at(term.point)}: did not complete "
                          f"{done['incomplete']} of {n} trials ({'; '.join(done.get('reasons') or ())})")
        if validity and validity.get("invalid"):
            out["invalid"] += [f"{term.transport}{_at(term.point)}: {r}"
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
          control_not_run: str | None = None, *, trials: int | None = None) -> dict:
    """A claim's verdict with its control's (module docstring). ``doc``: its results document;
    None with ``not_run`` saying why there is none (the scenario cannot run here, the runs
    failed); ``control_doc`` / ``control_not_run`` the same for the control's runs; ``trials``:
    how many trials each was asked for (None: the documents' ``inputs.trials``, else their own
    counts)."""
    out = judge_rules(claim, doc, not_run, trials=trials)
    out["rules_verdict"] = out["verdict"]
    ctl = judge_control(claim, doc, control_doc, control_not_run, trials=trials)
    out["control"] = ctl
    if out["verdict"] == YES:
        if ctl is None:
            out["verdict"], out["reason"] = UNPROVEN, "the rules hold, but no control shows they can fail"
        elif ctl["outcome"] == PASSES:
            out["verdict"], out["reason"] = UNPROVEN, f"the rules hold, but the control {PASSES}"
        elif ctl["outcome"] == COULD_NOT_RUN:
            out["verdict"] = HOLDS_CONTROL_UNPROVEN
            out["reason"] = "the control could not run" + (f": {ctl['reason']}" if ctl["reason"] else "")
    return out


def merge_control(doc: dict | None, control_doc: dict, transports, stand_in=()) -> dict:
    """The results the control is judged on: ``doc`` (the claim's) with, at every point, the
    ``transports`` the control ran (None: every transport of ``control_doc``) replaced by the
    control's (matched by point label; a transport the control lacks is removed, so a rule on
    it counts 0 trials); ``stand_in`` pairs (claim's transport, transport the control ran in
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
                  control_not_run: str | None = None, *, trials: int | None = None) -> dict | None:
    """The control's verdict: ``{"removes", "set", "transports", "outcome"`` (:data:`FAILS`,
    :data:`PASSES`, :data:`COULD_NOT_RUN`), ``"verdict"`` (the rules' on the merged results),
    ``"reason", "rules", "terms", "trials"}``; None without a control. It fails as it should
    only when its own runs had no trouble (:func:`control_trouble`) and a rule fails on them."""
    c = claim.control
    if c is None:
        return None
    head = {"removes": c.removes, "set": c.set_texts(), "transports": list(c.transports) if c.transports else None,
            **({"stand_in": dict(c.stand_in)} if c.stand_in else {})}
    if control_doc is None:
        return {**head, "outcome": COULD_NOT_RUN, "verdict": NOT_RUNNABLE,
                "reason": control_not_run or "no results", "rules": [], "terms": [], "trials": None}
    own = merge_control(None, control_doc, c.transports, c.stand_in)
    asked = asked_trials(control_doc, trials) or max([p.get("trials") or 0 for p in own.get("points") or ()] + [0])
    ran = list(c.transports) if c.transports else list(dict.fromkeys(
        [*claim.transports(), *(n for p in own.get("points") or () for n in p.get("transports") or {})]))
    trouble = control_trouble(claim, own, ran, asked)
    v = judge_rules(claim, merge_control(doc, control_doc, c.transports, c.stand_in), trials=asked)
    if trouble:
        outcome, reason = COULD_NOT_RUN, "; ".join(trouble)
    elif v["verdict"] == NO and any(r["holds"] is False for r in v["rules"]):
        outcome, reason = FAILS, v["reason"]
    else:          # every rule holds; or wrong results, invalid or missing data of the claim's runs merged in
        outcome, reason = (PASSES if v["verdict"] == YES else COULD_NOT_RUN), v["reason"]
    return {**head, "outcome": outcome, "verdict": v["verdict"], "reason": reason, "rules": v["rules"],
            "terms": v["terms"], "trials": v["trials"]}


def judge_rules(claim: Claim, doc: dict | None, not_run: str | None = None, *, trials: int | None = None) -> dict:
    """A claim's rules alone on ``doc`` (no control): the verdict dict without ``control``
    (module docstring; ``trials``: as for :func:`judge`)."""
    terms = list(dict.fromkeys(t for r in claim.rules for t in r.terms()))
    out = {"id": claim.id, "verdict": NOT_RUNNABLE, "reason": "", "rules": [], "terms": [], "trials": None}
    if doc is None:
        out["reason"] = not_run or "no results"
        return out
    asked = asked_trials(doc, trials)
    counts = {t: term_trials(doc, t, asked) for t in terms}
    out["terms"] = [{"term": str(t), "transport": t.transport, "kpi": t.kpi, "point": t.point,
                     "stats": term_stats(doc, t)[0], "trials": {"n": counts[t]["n"], "of": counts[t]["of"]}}
                    for t in terms]
    rules = [judge_rule(r, doc, counts) for r in claim.rules]
    out["rules"] = rules
    low = min(counts.values(), key=lambda c: (c["n"] - c["of"], c["n"]))
    out["trials"] = {"n": low["n"], "of": low["of"]}
    wrong = wrong_results(doc, claim.transports())
    invalid = list(dict.fromkeys(x for r in rules for x in r["invalid"]))
    short = list(dict.fromkeys(x for c in counts.values() if c["n"] < c["of"] for x in c["short"]))
    undecided = [r for r in rules if r["holds"] is None]
    if wrong:
        out["verdict"], out["reason"] = NO, "; ".join(wrong)
    elif invalid:
        out["verdict"], out["reason"] = INVALID, "; ".join(invalid)
    elif short:
        out["verdict"], out["reason"] = UNPROVEN, f"{low['n']} of {low['of']} trials: " + "; ".join(short)
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
