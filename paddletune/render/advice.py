"""The `paddletune advise` view: ranked advice as numbered rich panels, or a JSON array.

Advice text embeds names read from the profile (variables, ops, loaders): it is printed
through fmt.clean(), so no control character in them reaches the terminal."""

import json
from collections import Counter
from typing import List, Optional, Sequence

from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel
from rich.text import Text

from ..advisors import Advice, checks, rank
from ..advisors.ranges import peak_range_text, range_text
from .fmt import clean

BADGE_STYLE = {"high": "bold white on red", "medium": "bold black on yellow",
               "low": "bold black on cyan", "info": "bold white on blue"}
BORDER_STYLE = {"high": "red", "medium": "yellow", "low": "cyan", "info": "blue"}
CATALOGUE = "docs/advice.md"  # the advice catalogue, one entry per advice id


def advice_json(advices: Sequence[Advice]) -> str:
    """A JSON array of the advice (to_dict()), most important first."""
    return json.dumps([a.to_dict() for a in rank(advices)], indent=2)


def render_advice(advices: Sequence[Advice], console: Optional[Console] = None,
                 checked: Optional[Sequence[str]] = None, extent=None):
    """Print the advice, most important first; one line naming the checks when there is none.
    `extent` (advisors.base.Extent): a profile cut short is said first."""
    console = console or Console()
    if extent is not None and not extent.complete:
        console.print(Text(clean(extent.sentence()), style="bold red"))
    ranked = rank(advices)
    if not ranked:
        console.print(no_problems_line(checked), soft_wrap=True)  # one line, however long
        return
    console.print(Text(headline(ranked), style="bold"))
    for number, advice in enumerate(ranked, 1):
        console.print(advice_panel(number, advice))


def no_problems_line(checked: Optional[Sequence[str]] = None) -> Text:
    done = checks() if checked is None else list(checked)
    return Text(f"No problems found (checked: {', '.join(done) or 'nothing'}).")


def headline(ranked: List[Advice]) -> str:
    """'3 pieces of advice (1 high, 2 medium), most important first:'."""
    counts = Counter(a.severity for a in ranked)
    parts = ", ".join(f"{counts[s]} {s}" for s in BADGE_STYLE if counts[s])
    noun = "piece" if len(ranked) == 1 else "pieces"
    return f"{len(ranked)} {noun} of advice ({parts}), most important first:"


def advice_panel(number: int, advice: Advice) -> Panel:
    """One advice: badge and title on the border; evidence, change, gain, confidence inside."""
    title = Text.assemble(f" {number}. ", (f" {advice.severity.upper()} ",
                                           BADGE_STYLE[advice.severity]),
                          " ", (clean(advice.title), "bold"), " ")
    return Panel(Group(*_body(advice)), title=title, title_align="left",
                 border_style=BORDER_STYLE[advice.severity])


def catalogue_link(advice_id: str) -> str:
    """Where the advice catalogue explains advice `advice_id`: its entry's anchor in
    docs/advice.md (the id is the anchor, so the link stays right as entries move)."""
    return f"{CATALOGUE}#{advice_id}"


def _body(advice: Advice) -> list:
    advice_id = clean(advice.id)
    return [_labelled("Evidence", advice.evidence),
            Text("Change:", style="bold"),
            Padding(Text(clean(advice.change), style="cyan"), (0, 0, 0, 2)),  # wrapped too
            _labelled("Expected gain", advice.expected_gain),
            *([_labelled("Range", span)] if (span := range_text(advice)) else []),
            *([_labelled("Range", peak)] if (peak := peak_range_text(advice)) else []),
            Text.assemble(("Confidence: ", "bold"), clean(advice.confidence),
                          (f" · see {catalogue_link(advice_id)}", "dim"))]


def _labelled(label: str, value: str) -> Text:
    return Text.assemble((f"{label}: ", "bold"), clean(value))
