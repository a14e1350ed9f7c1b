"""Live onboarding's answer logs (``live/<model_key>.jsonl``): every answer of an endpoint appended as it arrives,
one JSON object per line, flushed and synced, so that a crash or Ctrl-C resumes without asking again."""

from __future__ import annotations

import json
import os
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from locus_pipeline.storage.files import StorageError


class LiveAnswers:
    """The live-answers half of LocusHome (a mixin: it uses the home's paths and locks)."""

    if TYPE_CHECKING:  # the home's, which LocusHome gives its mixins

        @property
        def location(self) -> str: ...
        @property
        def path(self) -> Any: ...
        @property
        def remote(self) -> bool: ...
        def lock(self, name: str, *, blocking: bool = True) -> AbstractContextManager[bool]: ...

    def live_answers_path(self, model_key: str) -> Any:
        return self.path / "live" / f"{model_key}.jsonl"

    def _local_live_answers(self, model_key: str):
        if self.remote:
            raise StorageError(
                f"live onboarding keeps its answer log on a local home; {self.location} is remote. "
                "How to fix: run locus onboard with a local LOCUS_HOME"
            )
        path = self.live_answers_path(model_key)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def append_live_answer(self, model_key: str, record: dict) -> None:
        """Append one answer (a JSON-serializable mapping) under the model's lock, synced to disk before return."""
        path = self._local_live_answers(model_key)
        line = json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n"
        with self.lock(f"live-{model_key}"), open(path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def read_live_answers(self, model_key: str) -> list[dict]:
        """The answers logged so far, oldest first ([] when none). A last line cut short by a crash is removed
        from the file (that question is asked again), so the next answer starts a line of its own."""
        path = self._local_live_answers(model_key)
        if not path.exists():
            return []
        with self.lock(f"live-{model_key}"):
            text = path.read_text(encoding="utf-8")
            lines = text.split("\n")
            complete, tail = lines[:-1], lines[-1]  # tail: "" after a whole last line, else a cut-short write
            records = []
            for n, line in enumerate(complete, start=1):
                try:
                    records.append(json.loads(line))
                except ValueError:
                    raise StorageError(
                        f"{path} line {n} is not JSON. How to fix: remove that line (the question is asked again)"
                    ) from None
            if tail:
                with open(path, "r+b") as handle:
                    handle.truncate(len(text.encode("utf-8")) - len(tail.encode("utf-8")))
        return records
