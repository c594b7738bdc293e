"""A recipe's published figure (a reference), as ReFrame keeps one: a value with the definition it was
measured under, the device and setup, where it is published, and for a software release's figure its
release, commit and date (recipes/README.md describes the keys)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from reprokit.contract.definitions import Definition

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
# The references a cell is judged against unless --reference picks a release's: the publication's own.
PUBLICATION = "publication"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Reference(Strict):
    """A published figure: an absolute throughput on a device, or a speedup over the baseline, each
    with the definition it was measured under (definitions.DEFINITIONS)."""

    device: str | None = None
    devices: int | None = Field(default=None, ge=1)
    nodes: int = Field(default=1, ge=1)
    value: float | None = Field(default=None, gt=0)
    ratio: float | None = Field(default=None, gt=0)
    definition: Definition = Field(description="what the published figure counts (definitions.DEFINITIONS)")
    source: str | None = Field(default=None, description="where the figure is published, and which version")
    note: str | None = None
    # A figure beyond the publication's own: one software release's, picked with --reference ID.
    id: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="the release this figure belongs to, as --reference picks it (none: the publication's "
        f"figure, --reference {PUBLICATION}, the default)",
    )
    release: str | None = Field(
        default=None,
        description="the software release the figure was measured on (e.g. 'SynapseAI 1.15.0, optimum-habana "
        "1.11.0.dev0'), or 'unknown' with the reason in a note",
    )
    commit: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{40}$", description="the commit that set the figure"
    )
    date: str | None = Field(default=None, pattern=r"^\d{4}-\d{2}-\d{2}$", description="that commit's date")

    @model_validator(mode="after")
    def _one_kind(self) -> Reference:
        if (self.value is None) == (self.ratio is None):
            raise ValueError("give exactly one of 'value' (absolute) or 'ratio' (speedup over the baseline)")
        if self.value is not None and (self.device is None or self.devices is None):
            raise ValueError("an absolute reference needs 'device' and 'devices'")
        if self.id is not None and (self.release is None or self.value is None or self.id == PUBLICATION):
            raise ValueError(
                f"a reference with an id (a release's figure) needs 'release' and 'value', and an id other "
                f"than {PUBLICATION!r}"
            )
        return self

    @property
    def release_id(self) -> str:
        return self.id or PUBLICATION
