#!/usr/bin/env python3
"""The UI walk (issue 19): every screen a Dagster and MLflow user looks at, in a real headless Chromium.

    python scripts/ui_walk.py --home PATH [--build-tiny] [--out ui-walk] [--items 1-12] [--no-onboard]
                              [--dagster-port N] [--mlflow-port N] [--timeout-s 60] [--in-place]

Given a LOCUS_HOME that has been through the demo (`make demo`; or `--build-tiny`: a tiny synthetic home first,
~80 s), it copies the home to a temporary folder (the walk onboards a model and its servers write run history:
the user's home is left as it was; the copy is removed at the end; `--in-place` walks the home itself), starts
`make dev` (scripts/dev.sh: `dagster dev` and the MLflow UI) on $DAGSTER_PORT / $MLFLOW_PORT (else free ports), onboards
one model through the drop folder if the pool has none (as a user would: a CSV into incoming/), waits for the reports
refresh the sensor then launches, visits the screens of the issue's items 1-9 (and issue 58's items 7, 11 and 6 as
10-12; 12 removes the onboarded model, so it comes last), saves a screenshot and the rendered
DOM of each under --out, asserts on each page, prints one PASS/FAIL line per item (with what was checked) and exits
1 if any failed. The servers are always stopped (SIGINT to dev.sh; SIGKILL to what is left after 14 s).

The pages render client-side, so Chromium is driven over the DevTools protocol on a pipe (scripts/screenshot.py
Browser: standard library only) and each check waits for the text it needs. What the UI cannot show reliably
(the edges of the asset graph, a run's config defaults) is checked through Dagster's GraphQL API, and the output
says so ("[graphql]", "[rest]"). Needs Debian's chromium (exits 3 without it). Takes ~5 minutes on a 2-core machine,
most of it the reports refresh after the onboarding (~1 minute on a home that needs neither).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import screenshot  # noqa: E402

ONBOARDED_NAME = "ui-walk/onboarded model"  # a name with a slash and a space: the safe key differs from it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_port(name: str) -> int:
    """The port an environment variable names (DAGSTER_PORT, MLFLOW_PORT: what `make dev` reads), 0 when unset."""
    value = os.environ.get(name, "")
    if value and not value.isdigit():
        raise SystemExit(f"ui_walk: {name}={value!r} is not a port number")
    return int(value or 0)


@contextmanager
def walked_home(home: Path, *, in_place: bool = False) -> Iterator[Path]:
    """The home the walk runs on: a temporary copy of ``home`` (the walk may onboard a model; its servers write
    run history and relink MLflow), removed afterwards, so that ``home`` is left as it was; ``in_place``: the
    home itself. Stored paths are relative to the home (a copy works); the copy keeps symlinks as links."""
    if in_place:
        yield home
        return
    with tempfile.TemporaryDirectory(prefix="locus-ui-walk-") as tmp:
        copy = Path(tmp) / home.name
        shutil.copytree(home, copy, symlinks=True, ignore=shutil.ignore_patterns(".locks"))
        yield copy


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


# --------------------------------------------------------------------------------------------- the servers


class DevServers:
    """scripts/dev.sh (`make dev`) on a home, in its own session; stop() is SIGINT, then SIGKILL of what is left."""

    def __init__(self, home: Path, log: Path, *, dagster_port: int, mlflow_port: int, stop_grace_s: int = 8) -> None:
        self.dagster_port, self.mlflow_port, self.log_path = dagster_port, mlflow_port, log
        venv = Path(sys.executable).parent.parent
        env = {
            **os.environ,
            "LOCUS_HOME": str(home),
            "DAGSTER_PORT": str(dagster_port),
            "MLFLOW_PORT": str(mlflow_port),
            "VENV": str(venv),
            "STOP_GRACE_S": str(stop_grace_s),
            "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        }
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [str(REPO / "scripts" / "dev.sh")],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.started = time.monotonic()

    @property
    def dagster(self) -> str:
        return f"http://127.0.0.1:{self.dagster_port}"

    @property
    def mlflow(self) -> str:
        return f"http://127.0.0.1:{self.mlflow_port}"

    def wait_ready(self, timeout_s: float = 240) -> None:
        deadline = time.monotonic() + timeout_s
        while not (http_ok(self.dagster + "/server_info") and http_ok(self.mlflow + "/health")):
            if self.proc.poll() is not None:
                raise RuntimeError(f"scripts/dev.sh exited ({self.proc.returncode}):\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the servers did not answer in {timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(1)
        # the code location loads after the webserver answers
        while "locus" not in json.dumps(
            self.graphql(
                "{ workspaceOrError { ... on Workspace { locationEntries { name "
                "locationOrLoadError { __typename } } } } }"
            )
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the code location did not load in {timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(1)

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        request = urllib.request.Request(
            self.dagster + "/graphql",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
        if answer.get("errors"):
            raise RuntimeError(f"graphql: {answer['errors']}")
        return answer["data"]

    def log_tail(self, n: int = 3000) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-n:]

    def stop(self, limit_s: float = 14) -> float:
        """SIGINT to dev.sh (it stops both servers); SIGKILL to every process left after ``limit_s``. Seconds taken."""
        started = time.monotonic()
        pids = descendants(self.proc.pid) | {self.proc.pid}
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
        while time.monotonic() - started < limit_s and (self.proc.poll() is None or alive(pids)):
            time.sleep(0.2)
        for pid in alive(pids):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()
        return time.monotonic() - started


def descendants(root: int) -> set[int]:
    """Live (non-zombie) processes below ``root``, from /proc."""
    parent_of, state_of = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            state_of[int(entry.name)], parent_of[int(entry.name)] = fields[0], int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parent_of.items() if parent in frontier} - found
        found |= frontier
    return {pid for pid in found if state_of.get(pid) != "Z"}


def alive(pids: set[int]) -> set[int]:
    left = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.add(pid)
    return left


# --------------------------------------------------------------------------------------------- the walk


@dataclass
class Item:
    number: int
    title: str
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    shots: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> bool:
        (self.notes if ok else self.failures).append(what)
        return ok


class Walk:
    def __init__(
        self, home: Path, out: Path, servers: DevServers, browser: screenshot.Browser, *, timeout_s: float
    ) -> None:
        self.home, self.out, self.servers, self.browser, self.timeout_s = home, out, servers, browser, timeout_s

    def page(
        self,
        item: Item,
        name: str,
        url: str,
        needles: list[str],
        *,
        full_page: bool = False,
        after=None,
        then_needles: list[str] | None = None,
    ) -> str:
        """Open ``url``, wait for every needle, optionally run ``after(browser)`` (a click) and wait for
        ``then_needles``; save <out>/<item>-<name>.png and .html; record each needle found or missing; the text."""
        b = self.browser
        b.goto(url)
        missing = b.wait_for_text(needles, timeout_s=self.timeout_s)
        if after is not None:
            after(b)
            missing += b.wait_for_text(then_needles or [], timeout_s=self.timeout_s)
        stem = self.out / f"item{item.number}-{name}"
        b.screenshot(stem.with_suffix(".png"), full_page=full_page)
        stem.with_suffix(".html").write_text(b.dom(), encoding="utf-8")
        item.shots.append(stem.with_suffix(".png").name)
        for needle in [*needles, *(then_needles or [])]:
            item.check(needle not in missing, f"{name}: shows {needle!r}")
        return b.text()

    def asset_url(self, key: str, view: str | None = None, partition: str | None = None) -> str:
        query = {k: v for k, v in (("view", view), ("partition", partition)) if v}
        return f"{self.servers.dagster}/assets/{key}" + (f"?{urllib.parse.urlencode(query)}" if query else "")

    def latest_metadata(self, key: str, partition: str | None = None) -> dict[str, dict]:
        """[graphql] The latest materialization's metadata entries of an asset: {label: entry}."""
        data = self.servers.graphql(
            """query($key: AssetKeyInput!, $partitions: [String!]) { assetOrError(assetKey: $key) { ... on Asset {
                 assetMaterializations(limit: 1, partitions: $partitions) { partition metadataEntries {
                   __typename label ... on UrlMetadataEntry { url } ... on FloatMetadataEntry { floatValue }
                   ... on MarkdownMetadataEntry { mdStr } ... on TextMetadataEntry { text }
                   ... on BoolMetadataEntry { boolValue } } } } } }""",
            {"key": {"path": [key]}, "partitions": [partition] if partition else None},
        )
        events = data["assetOrError"].get("assetMaterializations") or []
        return {e["label"]: e for e in events[0]["metadataEntries"]} if events else {}


# ------------------------------------------------------------------------------------------ a tiny home

TINY_HOME = """
import os, sys, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import dagster as dg
from locus_pipeline.definitions import defs
from locus_pipeline.demo import SMALL_OPS
from locus_pipeline.instance import prepare_dagster_home
from locus_pipeline.intake import DropFolder
from locus_pipeline.storage import LocusHome

home = LocusHome()
DropFolder(home).ensure()
ops = {"raw_evaluations": {"config": {"source": "synthetic", "synthetic_size": "small"}}, **SMALL_OPS,
       "query_encodings": {"config": {"encoder": "hashing-256"}},
       "locus_checkpoint": {"config": {"epochs": 3, "finetune_steps": 0, "select_from_epoch": 0}},
       "routing_evaluation": {"config": {"methods": ["locus", "best_single", "oracle"], "n_boot": 200}}}
with dg.DagsterInstance.from_config(str(prepare_dagster_home(home.path))) as instance:
    job = defs().resolve_job_def("locus_job")
    result = job.execute_in_process(instance=instance, run_config={"ops": ops}, raise_on_error=False)
sys.exit(0 if result.success else 1)
"""


def build_tiny_home(home: Path, log: Path) -> None:
    """The small synthetic pool (24 models, 600 queries) through locus_job with a 3-epoch training and the
    weight-free hashing encoder: a home the walk can look at, in ~2-3 minutes on 2 cores (not a useful router)."""
    env = {
        **os.environ,
        "LOCUS_HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    with log.open("wb") as out:
        done = subprocess.run(
            [sys.executable, "-c", TINY_HOME], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO
        )
    if done.returncode != 0:
        raise RuntimeError(
            f"building the tiny home failed ({done.returncode}), see {log}:\n{log.read_text(errors='replace')[-3000:]}"
        )


# ------------------------------------------------------------------------------------------ onboarding


def onboarded_keys(home: Path) -> list[str]:
    import pandas as pd

    pool = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet", columns=["model_key", "source"])
    return sorted(pool.loc[pool["source"] == "onboarded", "model_key"].astype(str))


def onboard_one(home: Path, servers: DevServers, timeout_s: float = 300) -> str:
    """Drop ~128 evaluations of a renamed training model into incoming/ (write, then rename) and wait for the
    sensor's onboarding run to materialize onboarded_model_embedding; the model's key."""
    import pandas as pd

    from locus_model.data.contract import safe_model_key

    table = pd.read_parquet(home / "warehouse" / "evaluation_table.parquet")
    first = table[table["model"] == table["model"].iloc[0]].head(128)
    rows = first.assign(model=ONBOARDED_NAME)[["model", "query_id", "query", "benchmark", "score"]]
    part = home / "incoming" / "ui-walk.csv.part"
    rows.to_csv(part, index=False)
    os.replace(part, part.with_suffix(""))
    key = safe_model_key(ONBOARDED_NAME)
    deadline = time.monotonic() + timeout_s
    query = """query($key: AssetKeyInput!, $p: [String!]) { assetOrError(assetKey: $key) { ... on Asset {
                 assetMaterializations(limit: 1, partitions: $p) { runId } } } }"""
    while not servers.graphql(query, {"key": {"path": ["onboarded_model_embedding"]}, "p": [key]})["assetOrError"].get(
        "assetMaterializations"
    ):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the sensor did not onboard {ONBOARDED_NAME!r} in {timeout_s:.0f} s:\n{servers.log_tail()}"
            )
        time.sleep(2)
    return key


def settled(home: Path) -> str:
    """Why the pool and the reports may still change ("" when they will not): a file still in incoming/, or what
    the pipeline's own condition says (locus_pipeline.defs.sensors.reports_lag, read through Dagster's instance:
    a run queued or running, e.g. a catch-up onboarding or the refresh, or the reports index older than the pool)."""
    import dagster as dg

    from locus_pipeline.defs.sensors import reports_lag

    waiting = (
        [p.name for p in (home / "incoming").iterdir() if p.is_file() and not p.name.startswith(".")]
        if (home / "incoming").is_dir()
        else []
    )
    if waiting:
        return f"{len(waiting)} file(s) in incoming/ not taken in yet: {waiting[:3]}"
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        return reports_lag(instance)


def wait_for_reports(servers: DevServers, home: Path, timeout_s: float = 900) -> None:
    """Wait until the reports follow the pool and nothing can change either (settled): twice in a row, 5 s apart
    (a sensor tick may be between taking a file in and requesting its run)."""
    deadline = time.monotonic() + timeout_s
    calm = 0
    while calm < 2:
        why = settled(home)
        calm = 0 if why else calm + 1
        if why and time.monotonic() > deadline:
            raise TimeoutError(
                f"the pool and the reports did not settle in {timeout_s:.0f} s ({why}):\n{servers.log_tail()}"
            )
        time.sleep(5 if not why else 3)


# ------------------------------------------------------------------------------------------- the items

MODAL_FIT_JS = """(() => {
  const dialog = [...document.querySelectorAll('[role=dialog], .bp5-dialog, .bp4-dialog')].pop();
  if (!dialog) return {error: 'no dialog open'};
  const box = dialog.getBoundingClientRect();
  const img = dialog.querySelector('img');
  if (!img) return {error: 'no image in the dialog'};
  const table = dialog.querySelector('table');
  const pic = img.getBoundingClientRect();
  return {dialog_right: box.right, img_right: pic.right, img_width: pic.width, natural: img.naturalWidth,
          img_before_table: !table || !!(img.compareDocumentPosition(table) & Node.DOCUMENT_POSITION_FOLLOWING)};
})()"""


def item1(walk: Walk, item: Item) -> None:
    """Column schemas, owners and tags, float metadata in the Plots tab, a useful pool preview."""
    from locus_model.pool_schema import POOL_SCHEMA

    text = walk.page(
        item,
        "pool",
        walk.asset_url("model_embeddings"),
        [
            "Columns",
            "embedding",
            str(POOL_SCHEMA.field("embedding").type),
            "source",
            "Owners",
            "Tags",
            "layer: pool",
            "Row count",
            "training_models",
            "onboarded_models",
            "newest",
        ],
    )
    item.check(re.search(r"Owners\s+locus", text) is not None, "pool: owner team:locus shown (as 'locus')")
    walk.page(
        item,
        "checkpoint-plots",
        walk.asset_url("locus_checkpoint"),
        ["Metadata", "val_routing_acc"],
        after=lambda b: b.click_text("Plots"),
        then_needles=["val_routing_acc", "val_loss"],
    )
    charts = walk.browser.evaluate("document.querySelectorAll('canvas').length")
    item.check(charts >= 2, f"checkpoint: the Plots tab draws {charts} charts")
    nodes = walk.servers.graphql("""{ assetNodes { assetKey { path } owners { ... on TeamAssetOwner { team }
                                    ... on UserAssetOwner { email } } } }""")["assetNodes"]
    ownerless = sorted(n["assetKey"]["path"][-1] for n in nodes if not n["owners"])
    item.check(not ownerless, f"[graphql] every asset has an owner ({len(nodes)} assets; without: {ownerless})")
    meta = walk.latest_metadata("locus_checkpoint")
    floats = sorted(k for k, e in meta.items() if e["__typename"] == "FloatMetadataEntry")  # the kept model's figures
    item.check({"val_routing_acc", "val_loss"} <= set(floats), f"[graphql] float entries for Plots: {floats}")
    newest = (
        walk.latest_metadata("model_embeddings").get("newest", {}).get("mdStr", "").replace("\\_", "_")
    )  # escaped Markdown
    item.check(
        "| source" in newest and "embedded_at" in newest, "[graphql] pool preview 'newest' is the newest rows by source"
    )


def item2(walk: Walk, item: Item) -> None:
    """A report: summary and figure first, the figure fits the modal, long tables in the Parquet output."""
    for name in ("embedding_geometry", "family_clusters"):
        walk.page(item, f"{name}", walk.asset_url(name), ["summary", "report", "Row count", "Columns"])
        walk.browser.click_text("[Show Markdown]")
        walk.browser.wait_for_text(["Summary:"], timeout_s=walk.timeout_s)
        fit = walk.browser.evaluate(MODAL_FIT_JS) or {}
        shot = walk.out / f"item2-{name}-report.png"
        walk.browser.screenshot(shot)
        item.shots.append(shot.name)
        item.check(
            "error" not in fit and fit["img_right"] <= fit["dialog_right"] + 1,
            f"{name}: the report's figure fits the modal ({fit})",
        )
        item.check(bool(fit.get("img_before_table")), f"{name}: the figure comes before the tables")
        walk.browser.evaluate("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}))")


def item3(walk: Walk, item: Item) -> None:
    """Lineage reads left to right by group; raw_evaluations feeds no analysis."""
    walk.page(
        item,
        "lineage",
        f"{walk.servers.dagster}/asset-groups",
        ["ingestion", "encoding", "training", "pool", "analyses", "onboarding", "evaluation"],
    )
    walk.page(
        item,
        "group-analyses",
        f"{walk.servers.dagster}/locations/locus/asset-groups/analyses",
        ["embedding_geometry", "model_atlas", "analysis_reports"],
    )
    data = walk.servers.graphql("""{ assetNodes { assetKey { path } groupName dependedByKeys { path } } }""")
    groups = {n["assetKey"]["path"][-1]: n["groupName"] for n in data["assetNodes"]}
    raw = next(n for n in data["assetNodes"] if n["assetKey"]["path"] == ["raw_evaluations"])
    fed = sorted(k["path"][-1] for k in raw["dependedByKeys"])
    item.check(
        not [k for k in fed if groups.get(k) == "analyses"], f"[graphql] raw_evaluations feeds {fed}, no analysis"
    )
    # the graph's layout: each group's box right of the one before it (the sidebar lists the same names: rightmost)
    walk.browser.goto(f"{walk.servers.dagster}/asset-groups")
    walk.browser.wait_for_text(["ingestion", "analyses"], timeout_s=walk.timeout_s)
    xs = (
        walk.browser.evaluate("""(() => { const b = {};
        for (const g of ['ingestion','encoding','training','pool','analyses']) {
        const found = [...document.querySelectorAll('div, span')]
          .filter(e => e.children.length === 0 && e.textContent.trim() === g)
          .map(e => e.getBoundingClientRect()).filter(r => r.width > 0);
        if (found.length) b[g] = Math.max(...found.map(r => r.x)); } return b; })()""")
        or {}
    )
    order = [xs.get(g, -1) for g in ("ingestion", "encoding", "training", "pool", "analyses")]
    item.check(
        len(xs) == 5 and order == sorted(order) and len(set(order)) == 5,
        f"lineage reads left to right: ingestion < encoding < training < pool < analyses (x = {order})",
    )
    item.notes.append(
        "the global lineage opens with the groups collapsed (Dagster's default for several groups): "
        "a group's page (item3-group-analyses.png) shows its assets"
    )


def item4(walk: Walk, item: Item, onboarded_key: str) -> None:
    """The atlas has a URL, linked from the pool asset and from an onboarded model."""
    pool_meta = walk.latest_metadata("model_embeddings")
    url = pool_meta.get("atlas", {}).get("url")
    item.check(bool(url), f"[graphql] model_embeddings has an 'atlas' URL entry: {url or pool_meta.get('atlas')}")
    walk.page(item, "pool-atlas-link", walk.asset_url("model_embeddings"), ["atlas", "atlas.html"])
    if not onboarded_key:
        item.failures.append(
            "no onboarded model in the pool (--no-onboard): the link from an onboarded model is not checked"
        )
        return
    onboarded_meta = walk.latest_metadata("onboarded_model_embedding", onboarded_key)
    item.check(
        bool(onboarded_meta.get("atlas", {}).get("url")), f"[graphql] onboarded model {onboarded_key} links the atlas"
    )
    walk.page(
        item,
        "onboarded-model",
        walk.asset_url("onboarded_model_embedding", partition=onboarded_key),
        ["atlas", "nearest_models", "per_benchmark_profile"],
    )
    if url:
        followed = re.sub(r"^http://127\.0\.0\.1:\d+", walk.servers.mlflow, url)
        # make dev's ports, recorded in the home's ui.json, are what every link writer reads (issue 69 item 4)
        item.check(followed == url, f"the stored atlas link carries this walk's MLflow port ({url[:60]})")
        walk.page(item, "atlas-in-mlflow", followed, ["atlas.html", "reports"])
        frame = walk.browser.evaluate(
            "[...document.querySelectorAll('iframe')].map(f => f.src || f.srcdoc.length).join(' ')"
        )
        item.check(bool(frame), f"the MLflow artifact page renders the atlas in a frame ({str(frame)[:80]})")


def item5(walk: Walk, item: Item, onboarded_name: str) -> None:
    """The atlas page: a distinct colour per family, onboarded models labelled, every bar label drawn."""
    import pandas as pd

    atlas = walk.home / "reports" / "atlas.html"
    url = atlas.resolve().as_uri() + "#model=" + urllib.parse.quote(onboarded_name)
    walk.page(item, "atlas", url, ["LOCUS model atlas"])
    html = walk.browser.dom()
    plot2d = html.split('id="atlas-2d"', 1)[-1].split('id="atlas-3d"', 1)[0]
    colours = set(re.findall(r'<path class="point[^"]*"[^>]*style="[^"]*fill: (rgb\([^)]*\))', plot2d))
    legend = re.findall(r'class="legendtext"[^>]*>([^<]*)<', plot2d)
    item.check(
        len(colours) == len(legend) and len(legend) > 1,
        f"{len(legend)} legend entries, {len(colours)} distinct colours",
    )
    pool = pd.read_parquet(walk.home / "warehouse" / "model_embeddings.parquet", columns=["model", "source"])
    if (pool["source"] == "onboarded").any():
        item.check("onboarded" in legend and "unknown family" not in legend, f"legend names onboarded models: {legend}")
    if onboarded_name:
        item.check(
            f'data-selected="{onboarded_name}"' in html and "(onboarded)" in html,
            f"the onboarded model {onboarded_name!r} opens from #model= and says it is onboarded",
        )
    bars = walk.browser.evaluate("""(() => { const box = document.getElementById('benchmark-bars');
        if (!box) return null; const outer = box.getBoundingClientRect();
        const labels = [...box.querySelectorAll('.ytick text, .xtick text, .bartext, text.bartext')].map(t => {
          const r = t.getBoundingClientRect(); return [t.textContent, r.left, r.right]; });
        return {left: outer.left, right: outer.right, labels: labels}; })()""")
    benches = set(
        pd.read_parquet(walk.home / "warehouse" / "evaluation_table.parquet", columns=["benchmark"])[
            "benchmark"
        ].astype(str)
    )
    ticks = [label for label in (bars or {}).get("labels", []) if label[0] in benches]
    cut = [label[0] for label in ticks if label[1] < bars["left"] - 1 or label[2] > bars["right"] + 1]
    item.check(
        bool(ticks) and not cut,
        f"the selected model's benchmark bars: {len(ticks)} labels drawn, none cut at the edges {cut}",
    )


def item6(walk: Walk, item: Item) -> None:
    """MLflow: the experiment opens as model training; the run links back to Dagster; the registered model."""
    experiments = json.loads(
        urllib.request.urlopen(
            walk.servers.mlflow + "/ajax-api/2.0/mlflow/experiments/get-by-name?experiment_name=locus", timeout=30
        ).read()
    )["experiment"]
    tags = {t["key"]: t["value"] for t in experiments.get("tags", [])}
    item.check(
        tags.get("mlflow.experimentKind") == "custom_model_development",
        f"[rest] experiment kind tag: {tags.get('mlflow.experimentKind')}",
    )
    eid = experiments["experiment_id"]
    meta = walk.latest_metadata("locus_checkpoint")
    link = re.sub(r"^http://127\.0\.0\.1:\d+", walk.servers.mlflow, meta.get("mlflow_experiment", {}).get("url", ""))
    item.check(
        "workflowType=machine_learning" in link,
        f"[graphql] locus_checkpoint links the experiment in the model-training view: {link}",
    )
    text = walk.page(item, "experiment", link or f"{walk.servers.mlflow}/#/experiments/{eid}", ["Runs", "locus-"])
    item.check("Detect Issues" not in text, "the experiment opens on its runs (not the GenAI overview)")
    item.notes.append(
        "MLflow 3.17.2 opens a bare experiment URL in its GenAI view whatever the experiment's "
        "mlflow.experimentKind tag (the view follows the UI-wide GenAI / Model training switch): "
        "every link LOCUS makes carries ?workflowType=machine_learning"
    )
    run_link = re.sub(r"^http://127\.0\.0\.1:\d+", walk.servers.mlflow, meta.get("mlflow_run", {}).get("url", ""))
    item.check("/runs/" in run_link, f"[graphql] locus_checkpoint links its MLflow run: {run_link}")
    text = walk.page(item, "run", run_link, ["LOCUS checkpoint trained by Dagster run", "dagster.run_url"])
    item.check("Evaluation runs" not in text, "the run opens in the model-training view (not GenAI's evaluation runs)")
    links = walk.browser.evaluate(
        "[...document.querySelectorAll('a')].map(a => a.href).filter(h => /:\\d+\\/runs\\//.test(h) && "
        "!h.includes('#')).join(' ')"
    )
    item.check(bool(links), f"the run's description links the Dagster run ({(links or '')[:120]})")
    walk.page(
        item,
        "run-metrics",
        run_link.replace("?", "/model-metrics?", 1) if "?" in run_link else run_link + "/model-metrics",
        ["val_routing_acc"],
    )
    sections = re.findall(r"^(\w[\w ]*)\n\((\d+)\)\nAdd chart", walk.browser.text(), flags=re.M)
    names = [name for name, _ in sections]
    item.check(
        bool(names) and names[0] == "epoch",
        f"run metrics: the per-epoch curves' section comes first (sections in order: {sections})",
    )
    walk.page(item, "registered-model", f"{walk.servers.mlflow}/#/models/locus", ["set encoder", "current", "Version"])


def item7(walk: Walk, item: Item) -> None:
    """incoming/ exists; make dev prints no DEBUG lines and no dagster.yaml warning; Default experiment's artifacts in
    the home."""
    item.check((walk.home / "incoming").is_dir(), f"{walk.home / 'incoming'} exists")
    log = walk.servers.log_path.read_text(errors="replace")
    debug = [line for line in log.splitlines() if " - DEBUG - " in line]
    item.check(not debug, f"make dev's output: {len(debug)} DEBUG lines so far (runs included: the onboarding run)")
    item.check("will not be used" not in log, "no 'dagster.yaml in the current folder ... will not be used' warning")
    default = json.loads(
        urllib.request.urlopen(
            walk.servers.mlflow + "/ajax-api/2.0/mlflow/experiments/get?experiment_id=0", timeout=30
        ).read()
    )
    location = default["experiment"]["artifact_location"]
    item.check(str(walk.home.resolve()) in location, f"[rest] the Default experiment's artifacts: {location}")
    walk.page(item, "runs", f"{walk.servers.dagster}/runs", ["onboarding_job"])


def item8(walk: Walk, item: Item) -> None:
    """The docs match the screens: docs/pipeline.md names every asset the catalog shows, the README the ports and
    the onboarding partition, docs/ui.md this walk and its time; the launchpad's defaults are the library's."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    pipeline_doc = (REPO / "docs" / "pipeline.md").read_text(encoding="utf-8")
    ui_doc = (REPO / "docs" / "ui.md").read_text(encoding="utf-8")
    data = walk.servers.graphql("{ assetNodes { assetKey { path } } }")
    assets = sorted(n["assetKey"]["path"][-1] for n in data["assetNodes"])
    text = walk.page(
        item, "catalog", f"{walk.servers.dagster}/assets", ["model_embeddings", "onboarded_model_embedding"]
    )
    item.check(all(a in text for a in assets[:5]), "the catalog lists the assets")
    unnamed = [a for a in assets if f"`{a}" not in pipeline_doc]
    item.check(not unnamed, f"docs/pipeline.md names every asset ({len(assets)}); missing: {unnamed}")
    for needle in ("DAGSTER_PORT", "MLFLOW_PORT", "onboarded_model_embedding"):
        item.check(needle in readme, f"README mentions {needle}")
    for needle in ("scripts/ui_walk.py", "minutes"):
        item.check(needle in ui_doc, f"docs/ui.md mentions {needle}")
    item.check("onboarded_model[" not in readme, "README has no stale 'onboarded_model[<key>]'")
    from locus_model.training import TrainConfig

    config = walk.servers.graphql("""{ assetNodeOrError(assetKey: {path: ["locus_checkpoint"]}) { ... on AssetNode {
        configField { configType { ... on CompositeConfigType { fields { name defaultValueAsJson } } } } } } }""")
    fields = {
        f["name"]: f["defaultValueAsJson"] for f in config["assetNodeOrError"]["configField"]["configType"]["fields"]
    }
    item.check(
        fields.get("epochs") == str(TrainConfig().epochs),
        f"[graphql] launchpad epochs default {fields.get('epochs')} = the library's (and the demo's) "
        f"{TrainConfig().epochs}",
    )


def item9(walk: Walk, item: Item) -> None:
    """`locus search`: the target profile beside the found models', the distance explained (a terminal, no screen)."""
    import pandas as pd

    benches = sorted(
        pd.read_parquet(walk.home / "warehouse" / "evaluation_table.parquet", columns=["benchmark"])["benchmark"]
        .astype(str)
        .unique()
    )[:2]
    target = f"{benches[0]}=0.9,{benches[-1]}=0.5"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "locus_pipeline.cli",
            "search",
            "--home",
            str(walk.home),
            "--target",
            target,
            "--k",
            "3",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    (walk.out / "item9-locus-search.txt").write_text(out.stdout + out.stderr, encoding="utf-8")
    item.shots.append("item9-locus-search.txt")
    item.check(out.returncode == 0, f"locus search exits 0 ({out.returncode}: {out.stderr[-300:]})")
    item.check(
        "(target profile)" in out.stdout and benches[0] in out.stdout,
        "the target's profile is the first row, beside the found models'",
    )
    item.check(
        "distance:" in out.stdout and "atlas" in out.stdout, "the distance is explained (same scale as the atlas)"
    )
    item.check(
        "Ranked by target_distance" in out.stdout, "ranked by the distance to the target given (issue 58 item 9)"
    )
    helptext = subprocess.run(
        [sys.executable, "-m", "locus_pipeline.cli", "search", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    ).stdout
    item.check("real models" not in helptext, "the help does not promise real models")


def item10(walk: Walk, item: Item) -> None:
    """Issue 58 item 7: the portfolios report names the portfolio's models and shows no nan for an unknown size."""
    import pandas as pd

    from locus_model.analysis.portfolio_curves import smallest_matching_portfolio

    members = smallest_matching_portfolio(pd.read_parquet(walk.home / "warehouse" / "portfolios.parquet"), "k_center")
    report = walk.latest_metadata("portfolios").get("report", {}).get("mdStr", "")
    plain = report.replace("\\", "")  # the markdown escapes names' | _ etc.
    item.check(
        bool(members) and all(m.replace("\\", "") in plain for m in members[:6]),
        f"[graphql] the report names the smallest k-center portfolio's models ({members[:6]})",
    )
    item.check("| nan |" not in report, "[graphql] no nan in the report's tables (params_b of unknown sizes)")
    walk.page(item, "portfolios", walk.asset_url("portfolios"), ["summary", members[0] if members else "k-center"])


def item11(walk: Walk, item: Item, onboarded_key: str) -> None:
    """Issue 58 item 11: no text metadata entry long enough to be cut in the UI (long ones are markdown or URLs);
    the router's description and the atlas link show whole."""
    from locus_pipeline.defs.metadata import TEXT_SHOWN

    nodes = walk.servers.graphql("{ assetNodes { assetKey { path } isPartitioned } }")["assetNodes"]
    long = []
    for node in nodes:
        key = node["assetKey"]["path"][-1]
        if node["isPartitioned"] and not onboarded_key:
            continue
        meta = walk.latest_metadata(key, onboarded_key if node["isPartitioned"] else None)
        long += [
            f"{key}.{label} ({len(e['text'])} chars)"
            for label, e in meta.items()
            if e["__typename"] == "TextMetadataEntry" and len(e["text"]) > TEXT_SHOWN
        ]
    item.check(
        not long,
        f"[graphql] no text entry over {TEXT_SHOWN} characters in {len(nodes)} assets' latest metadata: {long}",
    )
    router = walk.latest_metadata("locus_checkpoint").get("router", {})
    described = router.get("mdStr") or router.get("text", "")
    item.check(
        router.get("__typename") in ("MarkdownMetadataEntry", "TextMetadataEntry") and bool(described),
        f"[graphql] locus_checkpoint's router entry: {router.get('__typename')}",
    )
    text = walk.page(item, "checkpoint-router", walk.asset_url("locus_checkpoint"), ["router"])
    item.check(
        described.replace("\\", "") in text, f"the router's description shows whole on the page ({described[:60]}...)"
    )
    atlas = walk.latest_metadata("model_embeddings").get("atlas", {})
    item.check(
        atlas.get("__typename") in ("UrlMetadataEntry", "MarkdownMetadataEntry"),
        "[graphql] model_embeddings' atlas entry is a URL (or a markdown line saying why not): "
        f"{atlas.get('__typename')}",
    )


def item12(walk: Walk, item: Item, onboarded_key: str, onboarded_name: str) -> None:
    """Issue 58 item 6: after `locus pool remove`, the removed model's partition no longer looks live (the lead
    checks this against the other helper's change: the partition is gone, or its latest materialization says
    removed)."""
    if not onboarded_key:
        item.failures.append("no onboarded model in the pool (--no-onboard): nothing to remove")
        return
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "LOCUS_HOME": str(walk.home),
        "DAGSTER_HOME": str(walk.home / "dagster"),
    }
    out = subprocess.run(
        [sys.executable, "-m", "locus_pipeline.cli", "pool", "remove", onboarded_name, "--home", str(walk.home)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    (walk.out / "item12-pool-remove.txt").write_text(out.stdout + out.stderr, encoding="utf-8")
    item.shots.append("item12-pool-remove.txt")
    item.check(out.returncode == 0, f"locus pool remove exits 0 ({out.returncode}: {out.stderr[-300:]})")
    keys = walk.servers.graphql("""{ assetNodeOrError(assetKey: {path: ["onboarded_model_embedding"]}) {
        ... on AssetNode { partitionKeys } } }""")["assetNodeOrError"].get("partitionKeys", [])
    latest = walk.latest_metadata("onboarded_model_embedding", onboarded_key)
    routable = latest.get("routable", {}).get("boolValue")
    item.check(
        onboarded_key not in keys or routable is False or "removed" in latest,
        f"[graphql] partition {onboarded_key!r}: {'gone' if onboarded_key not in keys else 'kept'}; latest "
        f"materialization: routable {routable}, entries {sorted(latest)}",
    )
    if onboarded_key in keys:
        text = walk.page(
            item, "removed-partition", walk.asset_url("onboarded_model_embedding", partition=onboarded_key), ["removed"]
        )
        item.check("routable: true" not in text.lower(), "the partition's page no longer says routable: true")


ITEMS = [
    (1, "Dagster asset pages: columns, owners, tags, float metadata + Plots, pool preview"),
    (2, "Reports: summary and figure first, figure fits the modal, long tables in Parquet"),
    (3, "Lineage: groups left to right, no raw_evaluations edges into the analyses"),
    (4, "The atlas has a URL, linked from the pool asset and an onboarded model"),
    (5, "The atlas: colours per family, onboarded models labelled, bar labels drawn"),
    (6, "MLflow: model-training experiment, run linked to Dagster, registered model"),
    (7, "make dev / make demo: incoming/, no DEBUG lines, no dagster.yaml warning, Default experiment"),
    (8, "the README and docs match the screens"),
    (9, "locus search output"),
    (10, "Issue 58 item 7: the portfolios report names its models, no nan"),
    (11, "Issue 58 item 11: long metadata (router, atlas link) shows whole"),
    (12, "Issue 58 item 6: a removed model's partition does not look live (removes the onboarded model: last)"),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="a LOCUS_HOME that has been through the demo")
    parser.add_argument(
        "--out", type=Path, default=Path("ui-walk"), help="screenshots and DOMs go here (default ui-walk/)"
    )
    parser.add_argument(
        "--dagster-port",
        type=int,
        default=env_port("DAGSTER_PORT"),
        help="default: $DAGSTER_PORT (as make dev), else a free port",
    )
    parser.add_argument(
        "--mlflow-port",
        type=int,
        default=env_port("MLFLOW_PORT"),
        help="default: $MLFLOW_PORT (as make dev), else a free port",
    )
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="walk --home itself (it keeps the onboarded model and the runs); default: a temporary copy",
    )
    parser.add_argument("--timeout-s", type=float, default=60, help="how long a page may take to show its text")
    parser.add_argument(
        "--no-onboard",
        action="store_true",
        help="do not drop a file into incoming/ when the pool has no onboarded model",
    )
    parser.add_argument("--items", default="1-12", help="e.g. 1,4-6")
    parser.add_argument(
        "--build-tiny",
        action="store_true",
        help="first build a tiny synthetic home at --home (unless it holds a pool already; ~80 s)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if screenshot.chromium() is None:
        print(
            "ui_walk: chromium is not installed (Debian's chromium and chromium-driver: README, Tests)", file=sys.stderr
        )
        return 3
    home, out = args.home.resolve(), args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.build_tiny:
        if (home / "warehouse" / "model_embeddings.parquet").exists():
            print(f"ui_walk: --build-tiny: {home} already holds a pool; walking it as it is", file=sys.stderr)
        else:
            began = time.monotonic()
            build_tiny_home(home, out / "build.log")
            print(f"built a tiny synthetic home at {home} in {time.monotonic() - began:.0f} s", flush=True)
    if not (home / "warehouse" / "model_embeddings.parquet").exists():
        print(f"ui_walk: {home} has no pool: run the demo into it first (LOCUS_HOME={home} make demo)", file=sys.stderr)
        return 2
    wanted = set()
    for part in args.items.split(","):
        lo, _, hi = part.partition("-")
        wanted |= set(range(int(lo), int(hi or lo) + 1))
    with walked_home(home, in_place=args.in_place) as walked:
        if walked != home:
            print(
                f"walking a copy of {home} at {walked} (removed at the end; --in-place walks the home itself)",
                flush=True,
            )
        return walk_home(walked, out, args, wanted)


def walk_home(home: Path, out: Path, args: argparse.Namespace, wanted: set[int]) -> int:
    """Start the servers on ``home``, onboard a model if it has none, visit the items; the exit status."""
    started = time.monotonic()
    dagster_port = args.dagster_port or free_port()
    mlflow_port = args.mlflow_port or free_port()
    os.environ["MLFLOW_PORT"], os.environ["DAGSTER_PORT"] = (
        str(mlflow_port),
        str(dagster_port),
    )  # for the links this walk makes
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a SIGTERM still runs the finally: the servers stop
    servers = DevServers(home, out / "dev.log", dagster_port=dagster_port, mlflow_port=mlflow_port)
    results: list[Item] = []
    try:
        servers.wait_ready()
        print(
            f"servers ready in {time.monotonic() - started:.0f} s: Dagster {servers.dagster}, MLflow {servers.mlflow}",
            flush=True,
        )
        keys = onboarded_keys(home)
        if not keys and not args.no_onboard:
            keys = [onboard_one(home, servers)]
            print(f"onboarded {ONBOARDED_NAME!r} through incoming/ ({time.monotonic() - started:.0f} s)", flush=True)
        wait_for_reports(servers, home)
        print(
            f"the reports follow the pool and no run is queued or running ({time.monotonic() - started:.0f} s)",
            flush=True,
        )
        import pandas as pd

        pool = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet", columns=["model", "model_key"])
        key = keys[-1] if keys else ""
        name = str(pool.loc[pool["model_key"] == key, "model"].iloc[0]) if key else ""
        with screenshot.Browser(width=1280, height=900) as browser:
            walk = Walk(home, out, servers, browser, timeout_s=args.timeout_s)
            checks = {
                1: lambda i: item1(walk, i),
                2: lambda i: item2(walk, i),
                3: lambda i: item3(walk, i),
                4: lambda i: item4(walk, i, key),
                5: lambda i: item5(walk, i, name),
                6: lambda i: item6(walk, i),
                7: lambda i: item7(walk, i),
                8: lambda i: item8(walk, i),
                9: lambda i: item9(walk, i),
                10: lambda i: item10(walk, i),
                11: lambda i: item11(walk, i, key),
                12: lambda i: item12(walk, i, key, name),
            }
            for number, title in ITEMS:
                if number not in wanted:
                    continue
                item = Item(number, title)
                try:
                    checks[number](item)
                except Exception as err:  # noqa: BLE001 -- a broken page is this item's FAIL, the walk goes on
                    item.failures.append(f"{type(err).__name__}: {err}")
                results.append(item)
                status = "PASS" if not item.failures else "FAIL"
                print(f"{status} item {number}: {title}  [{', '.join(item.shots)}]", flush=True)
                for line in item.failures:
                    print(f"    FAIL {line}", flush=True)
                for line in item.notes:
                    print(f"    ok   {line}", flush=True)
    finally:
        took = servers.stop()
        print(
            f"servers stopped in {took:.1f} s; walk took {time.monotonic() - started:.0f} s; screenshots in {out}",
            flush=True,
        )
    failed = [i.number for i in results if i.failures]
    print(
        f"{'FAIL' if failed else 'PASS'}: {len(results) - len(failed)} of {len(results)} items pass"
        + (f" (failed: {failed})" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
