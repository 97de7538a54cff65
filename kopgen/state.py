"""The provenance a generated repo keeps in .kopgen/state.json, and what `kopgen update` reads of it.

One small JSON file: the kopgen version and spec hash of the last generation, the hash of every
file kopgen owns (to notice hand edits), and the text kopgen last rendered for each file the
user owns (the base of the three-way merge that brings template changes into them).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__

STATE_PATH = ".kopgen/state.json"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class State:
    kopgen: str = __version__
    spec_sha256: str = ""
    generated: dict[str, str] = field(default_factory=dict)  # kopgen's files: path -> sha256
    user_base: dict[str, str] = field(default_factory=dict)  # the user's files: path -> last rendered text

    def to_json(self) -> str:
        data = {
            "kopgen": self.kopgen,
            "spec_sha256": self.spec_sha256,
            "generated": dict(sorted(self.generated.items())),
            "user_base": dict(sorted(self.user_base.items())),
        }
        return json.dumps(data, indent=1, ensure_ascii=False) + "\n"

    @classmethod
    def read(cls, repo: Path) -> State | None:
        path = repo / STATE_PATH
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(data["kopgen"], data["spec_sha256"], data["generated"], data["user_base"])
