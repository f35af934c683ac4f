"""The five scheduler papers schedlab implements, by id: their titles (from the first line of each
paper's text) and first authors. Every ``paper`` attribute of a scheduler cites through
:func:`cite`, so a title is written once."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Paper:
    """One paper: ``id`` (000-004, as the project names them), ``title``, ``authors`` (short)."""

    id: str
    title: str
    authors: str


PAPERS: dict[str, Paper] = {
    paper.id: paper
    for paper in (
        Paper(
            "000",
            "Optimizing LLM Inference Throughput via Memory-aware and SLA-constrained Dynamic Batching",
            "Pang, Li, Wang",
        ),
        Paper("001", "Slice-Level Scheduling for High Throughput and Load Balanced LLM Serving", "Cheng et al."),
        Paper(
            "002",
            "Baton: Enhancing Batch-wise Inference Efficiency for Large Language Models via Dynamic Re-batching",
            "",
        ),
        Paper("003", "Online Scheduling for LLM Inference with KV Cache Constraints", "Jaillet et al."),
        Paper("004", "SLO-Aware Scheduling for Large Language Model Inferences", "Huang et al."),
    )
}


def title(paper_id: str) -> str:
    """The paper's title; KeyError for an id that is not one of the five."""
    return PAPERS[paper_id].title


def cite(paper_id: str, part: str = "") -> str:
    """The paper by its title and authors, then ``part`` (an algorithm, a baseline):
    ``Huang et al., "SLO-Aware Scheduling for Large Language Model Inferences", Alg. 1-2``."""
    paper = PAPERS[paper_id]
    text = f'{paper.authors}, "{paper.title}"' if paper.authors else f'"{paper.title}"'
    return f"{text}, {part}" if part else text


def cite_titles(paper_ids: tuple[str, ...], part: str) -> str:
    """``part`` and several papers by title: ``static-batching baseline of "A", "B" and "C"``."""
    titles = [f'"{PAPERS[paper_id].title}"' for paper_id in paper_ids]
    listed = titles[0] if len(titles) == 1 else ", ".join(titles[:-1]) + " and " + titles[-1]
    return f"{part} {listed}"
