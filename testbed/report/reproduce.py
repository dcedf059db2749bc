"""The reproduction table (``testbed reproduce``): one row per claim of the paper.

| claim (paper section) | paper's figure | this testbed, median [min-max] (n) | holds? | control | scaling |

from the claims (:mod:`testbed.spec.claimsfile`) and their verdicts
(:func:`testbed.metrics.claims.judge`): :func:`document` is ``reproduce.json``,
:func:`reproduce_table` the console table and :func:`markdown` ``reproduce.md``. Beside it, the
regime of every claim, paper / here (:func:`regime_table`, cells of :mod:`testbed.report.regime`:
the same as a run's report): the paper's values from the claims file, the testbed's from the
claim's scenario (its sweep points' range), detection measured (median over trials).
"""

from __future__ import annotations

import re

from testbed.metrics.claims import COULD_NOT_RUN, FAILS, HOLDS_CONTROL_UNPROVEN, INVALID, NO, NOT_RUNNABLE, UNPROVEN
from testbed.model.regime import Span, from_json, hull, to_json
from testbed.report.layout import Grid
from testbed.report.regime import SHORT, detect_rtts, short_cells
from testbed.report.trials import JOB_LABELS, LABELS, fmt_stats

FORMAT = "mrc-testbed-reproduce"
VERSION = 1
HEADERS = ["claim (paper section)", "paper's figure", "this testbed, median [min-max] (n of N)", "holds?", "control",
           "scaling"]
#: labels of the KPIs a rule may name that the trials table does not show (yet)
_RULE_LABELS = {"detect_median_s": ("time to detect, median over crossing QPs (ms)", lambda v: f"{v * 1e3:.3g}"),
                "detect_worst_s": ("time to detect, worst crossing QP (ms)", lambda v: f"{v * 1e3:.3g}")}


def _label(kpi: str) -> tuple[str, object]:
    if kpi.startswith("jobs."):
        _, name, key = kpi.split(".", 2)
        label, fmt = JOB_LABELS.get(key, (key, None))
        return f"{name}: {label}", fmt
    return LABELS.get(kpi) or _RULE_LABELS.get(kpi, (kpi, None))


def term_cell(term: dict) -> str:
    """``mrc busbw / host (%) @1%: 93.1 [92-94] (2 of 3)``: median [min-max] over the trials
    that gave a value, and how many did of the trials asked for (``(2)`` in a reproduce.json
    older than the count)."""
    label, fmt = _label(term["kpi"])
    at = f" @{term['point']}" if term.get("point") else ""
    stats = term.get("stats") or {}
    text = fmt_stats(stats, fmt) if fmt else fmt_stats(stats)
    of = (term.get("trials") or {}).get("of")
    if of:
        text = re.sub(r"\((\d+)\)$", rf"(\1 of {of})", text)
    return f"{term['transport']} {label}{at}: {text}"


def holds_cell(verdict: dict) -> str:
    """The verdict, with its reason for any but "yes" (``unproven (2 of 3 trials: ...)``)."""
    v = verdict["verdict"]
    if v in (NO, UNPROVEN, HOLDS_CONTROL_UNPROVEN, NOT_RUNNABLE, INVALID) and verdict.get("reason"):
        return f"{v} ({verdict['reason']})"
    return v


def control_cell(verdict: dict) -> str:
    """``removes ...: control fails as it should (...); mrc busbw / host (%): 30.1 (1 of 1)``
    (the control's own terms: those of the transports it ran), ``... control could not run:
    unproven (why)``, or ``none``."""
    ctl = verdict.get("control")
    if not ctl:
        return "none"
    ran = set(ctl.get("transports") or ()) or None
    terms = [t for t in ctl.get("terms") or () if ran is None or t["transport"] in ran]
    rules = ctl.get("rules") or []
    failing = [r for r in rules if r.get("holds") is False]
    if failing and ctl["outcome"] == FAILS:      # the first rule it fails, and how many (all in reproduce.md)
        reason = f" ({len(failing)} of {len(rules)} rules fail; {failing[0]['rule']}: {_vs(failing[0])})"
    elif ctl.get("reason") and ctl["outcome"] == COULD_NOT_RUN:
        reason = f" ({ctl['reason']})"
    else:
        reason = ""
    cells = "; ".join(term_cell(t) for t in terms)
    return f"{ctl['removes']}: control {ctl['outcome']}{reason}" + (f"; {cells}" if cells else "")


def row(claim: dict, verdict: dict) -> list[str]:
    return [f"{claim['id']} ({claim['section']})", claim["figure"],
            "; ".join(term_cell(t) for t in verdict.get("terms") or ()) or "-",
            holds_cell(verdict), control_cell(verdict), claim["scaling"]]


def payload_scaling(scenarios) -> str:
    """What the scaling column adds for a claim's scenarios (its sweep points, or the scenario
    alone) whose mrc/rc data packets do not carry RoCEv2's largest path MTU
    (:data:`testbed.spec.jobs.ROCE_PMTU_BYTES`): ``payload 8192 bytes per data packet`` (a sweep
    of it: ``payload 1024/4096/8192 bytes ...``); "" when they all do, or without an mrc/rc
    transport (kernel tcp is not sized by it)."""
    from testbed.spec.common import parse_transport
    from testbed.spec.jobs import ROCE_PMTU_BYTES, job_payload_bytes
    sizes = [job_payload_bytes(sc) for sc in scenarios
             if any(parse_transport(t).base in ("mrc", "rc") for t in sc.transports)]
    if not sizes or set(sizes) == {ROCE_PMTU_BYTES}:
        return ""
    return f"payload {'/'.join(str(n) for n in dict.fromkeys(sizes))} bytes per data packet"


def claim_regime(claim, scenarios=(), doc: dict | None = None) -> dict:
    """``{"paper", "here", "detect_rtts"}``: the paper's regime for ``claim`` (its claims file's
    values), the testbed's over ``scenarios`` (each number's range over the sweep points) and
    the measured detection in base RTTs (medians of ``detect_s`` and ``base_rtt_s`` of each
    transport at each point of the results ``doc``; None without)."""
    from testbed.spec.regime import paper_regime, scenario_regime
    heres = [from_json(scenario_regime(sc)) for sc in scenarios]
    here = to_json({k: hull([h[k] for h in heres]) for k in heres[0]}) if heres else None
    medians = {f"{i}:{name}": {k: (t.get(k) or {}).get("median") for k in ("detect_s", "base_rtt_s")}
               for i, p in enumerate((doc or {}).get("points") or ()) for name, t in (p.get("transports") or {}).items()}
    detect = detect_rtts(medians)
    return {"paper": paper_regime(getattr(claim, "regime", None) or {}), "here": here,
            "detect_rtts": None if detect is None else detect.to_json(), "detect_causes": detect_causes(doc)}


def detect_causes(doc: dict | None) -> dict | None:
    """How the crossing QPs detected the fault, per transport that detected it, over the trials
    of the results ``doc``: ``{"mrc": {"inference": stats, "timeout": stats}}`` (stats of the
    ``detect_causes.*`` KPIs: QP counts per trial); None when no transport reports them."""
    out = {}
    for p in (doc or {}).get("points") or ():
        for name, t in (p.get("transports") or {}).items():
            got = {k: t.get(f"detect_causes.{k}") for k in ("inference", "timeout")}
            if any((v or {}).get("max") for v in got.values()):   # some QP found its loss one of these ways
                out[name if len(doc["points"]) == 1 else f"{name} @{p.get('label', '?')}"] = got
    return out or None


def causes_text(causes: dict | None) -> str:
    """``mrc: inference 15 [15-15], timeout 0 [0-0] QPs`` (medians over trials [min-max])."""
    def one(v):
        return "-" if not v or v.get("median") is None else f"{v['median']:g} [{v['min']:g}-{v['max']:g}]"
    return "; ".join(f"{name}: inference {one(c.get('inference'))}, timeout {one(c.get('timeout'))} QPs"
                     for name, c in (causes or {}).items())


def claim_entry(claim, results: str | None, scenarios=(), doc: dict | None = None,
                control_results: str | None = None, digests: dict | None = None) -> dict:
    """A claim (:class:`testbed.spec.claimsfile.Claim`) as ``reproduce.json`` keeps it; the
    scaling text gets :func:`payload_scaling` of ``scenarios`` (the loaded scenario or its sweep
    points) appended, so a non-default payload is never left unsaid; ``regime``:
    :func:`claim_regime` (``doc``: the claim's results document, for the measured detection);
    ``control``: what it removes, its overrides and transports, its results file (None
    without a control); ``digests``: :func:`testbed.spec.claimdigests.claim_digests` (the key
    only when given)."""
    extra = payload_scaling(scenarios)
    ctl = getattr(claim, "control", None)
    scaling = f"{claim.scaling.rstrip().rstrip(';')}; {extra}" if extra else claim.scaling
    return {"id": claim.id, "section": claim.section, "figure": claim.figure, "scenario": str(claim.scenario),
            "rules": [r.text for r in claim.rules], "scaling": scaling,
            "estimate_s": {"quick": claim.estimate_quick_s, "full": claim.estimate_full_s},
            "results": results, "regime": claim_regime(claim, scenarios, doc),
            "control": None if ctl is None else {
                "removes": ctl.removes, "set": ctl.set_texts(),
                "transports": list(ctl.transports) if ctl.transports else None, "results": control_results,
                **({"stand_in": dict(ctl.stand_in)} if getattr(ctl, "stand_in", ()) else {})},
            **({"digests": digests} if digests is not None else {})}


def regime_row(claim: dict) -> list[str]:
    """A claim's regime cells, "paper / here" (``-`` for a reproduce.json older than the key)."""
    reg = claim.get("regime") or {}
    detect = reg.get("detect_rtts")
    try:
        measured = Span.of(detect)
    except (TypeError, ValueError):   # a hand-edited reproduce.json: show "-"
        measured = None
    return [claim["id"], *short_cells(reg.get("paper"), reg.get("here"), measured)]


def regime_table(doc: dict) -> Grid:
    """Every claim's regime, paper / here (:data:`testbed.report.regime.SHORT` columns)."""
    return Grid("the regime, paper / here (BDP in data packets; times in base RTTs; detection measured)",
                ["claim", *SHORT.values()], [regime_row(c) for c in doc["claims"]], split="rows")


def document(claims: list[dict], verdicts: list[dict], *, quick: bool, trials: int | None,
             written: str | None = None) -> dict:
    """``reproduce.json``: ``{"format", "version", "quick", "trials" (None: each claim's own),
    "written" (when given: UTC, ISO 8601), "claims": [claim entry + {"verdict": judge()'s dict}]}``."""
    return {"format": FORMAT, "version": VERSION, "quick": quick, "trials": trials,
            **({"written": written} if written else {}),
            "claims": [{**c, "verdict": v} for c, v in zip(claims, verdicts)]}


def reproduce_table(doc: dict) -> Grid:
    rows = [row(c, c["verdict"]) for c in doc["claims"]]
    return Grid(title(doc), HEADERS, rows, split="rows", justify=["left"] * len(HEADERS), shrink_first=(1, 5, 4))


def title(doc: dict) -> str:
    """``the MRC paper's claims, scaled: 3 of 7 hold (their controls fail)``."""
    held = sum(1 for c in doc["claims"] if c["verdict"]["verdict"] == "yes")
    return (f"the MRC paper's claims, scaled{' (quick)' if doc.get('quick') else ''}: {held} of "
            f"{len(doc['claims'])} hold (their controls fail)")


def _md(cell: str) -> str:
    return cell.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def markdown(doc: dict) -> str:
    """``reproduce.md``: the table, then each claim's rules with their values."""
    lines = [f"# The MRC paper's claims, scaled{' (quick suite)' if doc.get('quick') else ''}", "",
             f"{title(doc)[0].upper()}{title(doc)[1:]}. A claim holds when its rules hold and its control "
             "(the scenario with the mechanism under test removed) ran complete and valid and fails them. "
             "(n of N): trials that gave a value of the trials asked for; *unproven (n of N trials)*: fewer "
             "trials counted than asked (a trial without a summary, a transport missing from one, a job "
             "unfinished); *holds on its rules; control unproven*: the control could not run (crashed, timed "
             "out, a QP in ERR, invalid).", "",
             "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(_md(c) for c in row(c, c["verdict"])) + " |" for c in doc["claims"]]
    heads = ["claim", *SHORT.values()]
    lines += ["", "## The regime, paper / here", "",
              "BDP in data packets, times in base RTTs, detection measured (median); the paper's values "
              "and their sources are in the claims file (`regime:`).", "",
              "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    lines += ["| " + " | ".join(_md(x) for x in regime_row(c)) + " |" for c in doc["claims"]]
    if any(c.get("digests") for c in doc["claims"]):
        from testbed.spec.claimdigests import PARTS
        lines += ["", "## Pre-registration digests", "",
                  "What each verdict was judged on (`testbed reproduce --digests`; `--plan` compares them with "
                  "the last full suite's): sha256 of each part's canonical form, first 12 hex digits.", "",
                  "| claim | " + " | ".join(PARTS) + " |", "|---|" + "---|" * len(PARTS)]
        lines += [f"| {_md(c['id'])} | " + " | ".join(f"`{(c.get('digests') or {}).get(k) or '-'}`" for k in PARTS)
                  + " |" for c in doc["claims"]]
    lines += ["", "## Rules (medians compared; written before the runs)", ""]
    for c in doc["claims"]:
        lines.append(f"- **{c['id']}** ({c['scenario']}; results: {c.get('results') or '-'}):")
        judged = {r["rule"]: r for r in c["verdict"].get("rules") or ()}
        for text in c["rules"]:
            r = judged.get(text)
            if r is None or r["holds"] is None:
                state = "not judged" + (f": {r['reason']}" if r and r.get("reason") else "")
            else:
                state = (f"{'holds' if r['holds'] else 'fails'}: {_vs(r)}"
                         + (" (invalid runs)" if r.get("invalid") else ""))
            lines.append(f"  - `{text}`: {state}")
        if causes := causes_text((c.get("regime") or {}).get("detect_causes")):
            lines.append(f"  - detected by (the crossing QPs' first retirements, median [min-max] over trials): {causes}")
        ctl = c["verdict"].get("control")
        if ctl:
            stand = ctl.get("stand_in") or {}
            ran = ", ".join(stand.get(t, t) for t in ctl.get("transports") or ()) or "every transport"
            sets = ", ".join([f"`{k}: {v}`" for k, v in (ctl.get("set") or {}).items()]
                             + [f"{b} in place of {a}" for a, b in (ctl.get("stand_in") or {}).items()])
            lines.append(f"  - control ({ctl['removes']}; {sets}; runs {ran}; results: "
                         f"{(c.get('control') or {}).get('results') or '-'}): **{ctl['outcome']}**"
                         + (f" ({ctl['reason']})" if ctl.get("reason") and (not ctl.get("rules")
                                                                            or ctl["outcome"] == COULD_NOT_RUN) else ""))
            for r in ctl.get("rules") or ():
                state = ("not judged" + (f": {r['reason']}" if r.get("reason") else "") if r["holds"] is None
                         else f"{'holds' if r['holds'] else 'fails'}: " + _vs(r))
                lines.append(f"    - `{r['rule']}`: {state}")
        else:
            lines.append("  - control: none (the claim cannot count as holding)")
    return "\n".join(lines) + "\n"


def _vs(r: dict) -> str:
    """``0.93 vs 0.9``, or the reason a rule failed without a value (a trial gave none)."""
    left = (r.get("left") or {}).get("median")
    if left is None or r.get("bound") is None:
        return r.get("reason") or "-"
    return f"{left:.4g} vs {r['bound']:.4g}"
