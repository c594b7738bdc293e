"""Which release's figures judge a planned cell: the publication's own unless --reference names one
of a recipe's releases (recipe references with an id), and of those the figures for the cell's devices."""

from __future__ import annotations

from reprokit.contract.errors import ReprokitError
from reprokit.plan import accelerators
from reprokit.plan.recipes import Recipe, Reference, Variant
from reprokit.plan.references import PUBLICATION


def release_for(loaded: dict[str, Recipe], given: str | None) -> dict[str, str | None]:
    """Each recipe's release that --reference names (its id; None: the publication's figures, the
    default). A name no recipe has is refused in one line naming the ones they have; a recipe without
    it (another publication in the same session) is judged against none of its figures."""
    if not given:
        return dict.fromkeys(loaded)
    found = {name: recipe.release_named(given) for name, recipe in loaded.items()}
    if not any(found.values()):
        known = [
            f"{release_id} ({figures[0].release}, {figures[0].date})"
            if figures and figures[0].release
            else release_id
            for recipe in loaded.values()
            for release_id, figures in recipe.releases().items()
        ]
        raise ReprokitError(
            f"--reference {given}: no such release in {', '.join(loaded)}; known: {', '.join(dict.fromkeys(known))}"
        )
    # A recipe without it keeps the name, which none of its figures has: its cells have no reference.
    return {name: release_id or given for name, release_id in found.items()}


def of_release(variant: Variant, release: str | None) -> list[Reference]:
    """The variant's figures of one release (None: the publication's own, the default)."""
    return [r for r in variant.references if r.release_id == (release or PUBLICATION)]


def references_for(variant: Variant, accelerator: str, release: str | None = None) -> list[Reference]:
    """What a cell on `accelerator` is judged against: the release's figures for the profile's devices
    (a Gaudi3's figure judges only a cell that ran on a Gaudi3: verdicts.reference_for), and its ratios."""
    profile = accelerators.get(accelerator)
    keys = set(profile.device_names)
    return [r for r in of_release(variant, release) if r.ratio is not None or r.device in keys]
