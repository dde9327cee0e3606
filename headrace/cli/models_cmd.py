"""``headrace models``: every command on model versions, thin shells over
``headrace.trainers.api`` (list, show, promote, rollback) and ``headrace.ops.rollout`` (shadow,
canary, compare, promote --if-live-gate)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from headrace.cli import _context
from headrace.cli._context import PrefixOpt
from headrace.contracts import RolloutRole
from headrace.core.errors import PermanentError, ValidationFailed
from headrace.store import outcomes
from headrace.streams.topics import ControlTopics
from headrace.trainers import api

console = Console(highlight=False, soft_wrap=True)
models_app = typer.Typer(help="Model versions in the DFS model store, and their rollouts.",
                         no_args_is_help=True)
_topics = _context.control_topics


@models_app.command("list")
def models_list(ctx: typer.Context) -> None:
    """Models, their versions, production, and each version's outcome (promoted, kept, refused,
    rolled back; with why)."""
    table = Table("model", "versions", "production", "outcome of each version")
    for m in api.list_models(root=_context.base_settings(ctx).dfs_root):
        said = "\n".join(f"{v}: {o.line()}" for v, o in sorted(m.outcomes.items()))
        table.add_row(m.name, ",".join(map(str, m.versions)), str(m.production or "-"),
                      Text(said or "-"))
    console.print(table)


@models_app.command("show")
def models_show(ctx: typer.Context, ref: Annotated[str, typer.Argument(
        help="NAME (production, else latest) or NAME:VERSION")]) -> None:
    """Metrics and the confusion matrix as tables, and the image path."""
    root = _context.base_settings(ctx).dfs_root
    mv = api.show_model(root=root, ref=ref)
    m = mv.manifest
    console.print(f"[bold]{m.name}:{m.version}[/bold] {m.framework.value} {m.task.value} "
                  f"job {m.job_id} dataset {m.dataset.uri if m.dataset else '-'}")
    metrics = Table("metric", "value")
    for k, v in sorted(m.metrics.items()):
        metrics.add_row(k, f"{v:.4f}")
    console.print(metrics)
    imported = m.extra.get("import") or {}
    if imported:
        src = imported.get("source") or {}
        console.print(f"imported from {escape(str(src.get('uri', '?')))} ({imported.get('format')}"
                      f"{', sha256 ' + str(src['sha256'])[:12] if src.get('sha256') else ''})")
    if m.confusion_matrix:
        cm = Table("true \\ predicted", *m.classes)
        for cls, row in zip(m.classes, m.confusion_matrix, strict=True):
            cm.add_row(cls, *map(str, row))
        console.print(cm)
    gate = m.extra.get("gate") or {}
    if gate:
        console.print("gate: " + ("passed" if gate.get("passed") else
                                  "failed: " + escape("; ".join(gate.get("reasons", [])))))
    said = outcomes.of_version(root, m.name, m.version)
    if said is not None:
        console.print("outcome: " + escape(said.line()))
    png = mv.path / "confusion_matrix.png"
    if png.exists():
        console.print(f"confusion matrix image: {png}")


@models_app.command("export")
def models_export(ctx: typer.Context, ref: Annotated[str, typer.Argument(
        help="NAME:VERSION (or NAME, NAME@ALIAS)")],
        fmt: Annotated[str, typer.Option("--format", help="onnx or mlflow")] = "onnx") -> None:
    """The version as ONNX beside it (exports/onnx/), kept only when ONNX Runtime gives its
    labels and scores on its own validation split (torch models); or, with --format mlflow, to
    the MLflow tracking server (HEADRACE_MLFLOW_TRACKING_URI or MLFLOW_TRACKING_URI) as a run
    holding the version as an MLflow model, registered under the same name."""
    if fmt == "mlflow":
        _export_mlflow(ctx, ref)
        return
    if fmt != "onnx":
        raise ValidationFailed(f"--format {fmt}: use onnx or mlflow")
    from headrace.trainers.onnx_export import export_onnx  # torch and onnxruntime: lazily

    rec = export_onnx(root=_context.base_settings(ctx).dfs_root, ref=ref)
    chk = rec["check"]
    console.print(f"exported {rec['source']} as ONNX (opset {rec['opset']}): "
                  f"{chk['rows']} validation rows, labels identical, largest score difference "
                  f"{chk['max_abs_diff']:.2g} (tolerance {chk['tolerance']}); sha256 "
                  f"{rec['sha256'][:12]}")


@models_app.command("import")
def models_import(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="A model file: .onnx, a scikit-learn pickle "
                                               "(.pkl/.joblib), LightGBM .txt, XGBoost "
                                               ".json/.ubj, TorchScript, torch.export .pt2, "
                                               ".keras.")],
    name: Annotated[str, typer.Option("--name", help="The model name to publish under.")],
    inputs: Annotated[list[str] | None, typer.Option(
        "--input", help="NAME:KIND[=SPEC] for an input the model does not describe "
                        "(numeric=a,b,c; tensor=4; image=28x28x1; category; text).")] = None,
    labels: Annotated[str | None, typer.Option(
        "--labels", help="Class names in output order, for a model that names none.")] = None,
    sample: Annotated[str | None, typer.Option(
        "--sample", help="A labelled dataset on the DFS: gate the version on it.")] = None,
    label: Annotated[str, typer.Option("--label", help="The sample's label column.")] = "label",
    promote: Annotated[bool, typer.Option(
        "--promote", help="Without --sample: promote it anyway (not gated).")] = False,
    topic_prefix: PrefixOpt = "",
) -> None:
    """Import a model trained elsewhere as a new version: converted where needed, gated on
    --sample like a trained version, served by the scorers as Headrace's own."""
    from headrace.imports import ImportRequest, import_model, sources
    from headrace.imports.declarations import declarations

    root = _context.base_settings(ctx).dfs_root
    request = ImportRequest(source=sources.resolve(source), name=name,
                            declared=declarations(inputs or [], labels), sample=sample,
                            label=label, promote=promote)
    topics = _topics(ctx, topic_prefix)
    sink = None
    if _context.settings(ctx).bootstrap:  # announce a promotion; scorers also poll the alias
        from headrace.streams.clients import ensure_topics
        from headrace.streams.producing import EventSink

        conn = _context.connection(ctx)
        ensure_topics(conn, topics.specs())
        sink = EventSink(conn)
    try:
        result = import_model(root=root, request=request, sink=sink, topic=topics.models)
    finally:
        if sink is not None:
            sink.close()
    m = result.version.manifest
    console.print(f"imported {escape(source)} as {m.name}:{m.version} ({result.format}, "
                  f"{m.framework.value} {m.task.value}; inputs "
                  f"{escape(', '.join(f'{i.name} ({i.kind})' for i in m.input_signature()))}"
                  f"{'; classes ' + escape(','.join(m.classes)) if m.classes else ''})")
    console.print(f"outcome: {escape(result.outcome.line())}")


def _export_mlflow(ctx: typer.Context, ref: str) -> None:
    from headrace.imports.mlflow_export import MlflowSettings, export

    settings = MlflowSettings.from_env(dict(os.environ))
    logged = export(root=_context.base_settings(ctx).dfs_root, ref=ref, settings=settings)
    console.print(f"exported {ref} to MLflow at {settings.tracking_uri}: run {logged.run_id}, "
                  f"registered as models:/{logged.registered}/{logged.registry_version}")


@models_app.command("promote")
def models_promote(
    ctx: typer.Context, ref: str, topic_prefix: PrefixOpt = "",
    if_live_gate: Annotated[bool, typer.Option(
        "--if-live-gate", help="Only when the live rules of gates.yaml hold on the version's "
        "live comparison with production; prints every rule either way.")] = False,
    stream: Annotated[str | None, typer.Option(
        "--stream", help="With --if-live-gate: the stream it ran on (needed when several).")
    ] = None,
) -> None:
    """Point production at NAME:VERSION and publish ModelPublished."""
    if if_live_gate:
        promote_on_live_gate(ctx, ref, stream=stream, topics=_topics(ctx, topic_prefix))
        return
    ev = api.promote_model(root=_context.base_settings(ctx).dfs_root,
                           conn=_context.connection(ctx),
                           ref=ref, topics=_topics(ctx, topic_prefix))
    console.print(f"{ev.model_name}:{ev.version} is production (was {ev.previous_version})")


@models_app.command("rollback")
def models_rollback(ctx: typer.Context, name: str, topic_prefix: PrefixOpt = "") -> None:
    """Point production back at its previous version and publish ModelPublished."""
    ev = api.rollback_model(root=_context.base_settings(ctx).dfs_root,
                            conn=_context.connection(ctx), name=name,
                            topics=_topics(ctx, topic_prefix))
    console.print(f"{ev.model_name} rolled back to {ev.version} (from {ev.previous_version})")


@models_app.command("shadow")
def models_shadow(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(help="The candidate, NAME:VERSION (with --stop: NAME "
                                            "or NAME:VERSION).")],
    stream: Annotated[str | None, typer.Option(
        "--stream", "-s", help="The stream whose scorers run it (default: the model's name).")]
        = None,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the stream's shadow.")] = False,
    topic_prefix: PrefixOpt = "",
) -> None:
    """Run a candidate beside production on every scorer of a stream: its predictions go to
    predictions.STREAM.shadow, the live comparison to control.rollout.live."""
    from headrace.ops.rollout import control as rollout_control

    topics = _topics(ctx, topic_prefix)
    if stop:
        name = ref.partition(":")[0]
        conn = _context.connection(ctx)
        now = rollout_control.current_rollout(conn, stream or name, topics=topics)
        if now is not None and now.role not in (None, RolloutRole.SHADOW):
            raise PermanentError(f"stream {now.stream} runs a {now.role.value} of "
                                 f"{now.model_name}:{now.candidate_version}, not a shadow; "
                                 f"`models shadow --stop` stops only a shadow")
        st = rollout_control.stop_rollout(conn=conn, stream=stream or name, model_name=name,
                                          topics=topics)
        console.print(f"stopped the rollout of {st.model_name} on stream {st.stream}")
        return
    st = rollout_control.start_shadow(root=_context.base_settings(ctx).dfs_root,
                                      conn=_context.connection(ctx), ref=ref, stream=stream,
                                      topics=topics)
    console.print(f"{st.model_name}:{st.candidate_version} shadows production on stream "
                  f"{st.stream}: predictions.{st.stream}.shadow")


def _percents(value: str | None) -> list[float]:
    if not value:
        return []
    try:
        return [float(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter("use comma-separated percents, e.g. 5,25,50,100",
                                 param_hint="--steps") from None


@models_app.command("canary")
def models_canary(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(help="NAME:VERSION to canary (NAME with --stop).")],
    stream: Annotated[str, typer.Option("--stream", help="Stream whose scorers route.")],
    percent: Annotated[float | None, typer.Option(
        "--percent", help="Share of the keys the candidate scores (0-100, exclusive).")] = None,
    steps: Annotated[str | None, typer.Option(
        "--steps", help="Next percents, e.g. 5,25,50,100; reaching 100 promotes.")] = None,
    min_records: Annotated[int, typer.Option(
        "--min-records", help="Candidate records at a step before the next one.")] = 1000,
    max_error_margin: Annotated[float, typer.Option(
        "--max-error-margin",
        help="Roll back when the candidate's error rate is worse by more than this.")] = 0.01,
    min_labelled: Annotated[int, typer.Option(
        "--min-labelled",
        help="Labelled candidate records (labels.STREAM) at a step before the next one.")] = 0,
    max_accuracy_drop: Annotated[float | None, typer.Option(
        "--max-accuracy-drop",
        help="Roll back when the candidate's live accuracy (labels.STREAM) is worse by more "
             "than this (0-1).")] = None,
    stop: Annotated[bool, typer.Option("--stop", help="End the stream's canary.")] = False,
    topic_prefix: PrefixOpt = "",
) -> None:
    """Route a salted-hash share of a stream's keys to a candidate; step up, promote or roll
    back by itself."""
    from headrace.ops.rollout import canary

    topics = _topics(ctx, topic_prefix)
    if stop:
        was = canary.stop_canary(conn=_context.connection(ctx), topics=topics, stream=stream,
                                 name=ref.partition(":")[0])
        if was is None:
            console.print(f"no canary of {ref.partition(':')[0]} on {stream}")
        else:
            console.print(f"stopped the canary of {was.model_name}:{was.candidate_version} on "
                          f"{stream}: production scores every record")
        return
    if percent is None:
        raise typer.BadParameter("give --percent (or --stop)", param_hint="--percent")
    planned = canary.plan_canary(root=_context.base_settings(ctx).dfs_root, ref=ref,
                                 stream=stream, percent=percent, steps=_percents(steps),
                                 min_records=min_records,
                                 max_error_rate_margin=max_error_margin,
                                 min_labelled=min_labelled, max_accuracy_drop=max_accuracy_drop)
    st = canary.publish_canary(conn=_context.connection(ctx), topics=topics, state=planned)
    assert st.canary is not None
    nxt = ", then " + " -> ".join(f"{s:g}%" for s in st.canary.steps) if st.canary.steps else ""
    every = f"every {min_records} candidate records" + (
        f" and {min_labelled} labelled ones" if min_labelled else "")
    drop = (f"; rolled back if its live accuracy drops by more than {max_accuracy_drop:g}"
            if max_accuracy_drop is not None else "")
    console.print(f"canary {st.model_name}:{st.candidate_version} on {stream}: "
                  f"{st.canary.percent:g}% of the keys{nxt} ({every}; salt "
                  f"{st.canary.salt}){drop}")


def _ref(text: str) -> tuple[str, int]:
    name, sep, ver = text.partition(":")
    if not sep or not name or not ver.isdecimal():
        raise ValidationFailed(f"expected NAME:VERSION, not {text!r}")
    return name, int(ver)


@models_app.command("compare")
def models_compare(
    ctx: typer.Context,
    a: Annotated[str, typer.Argument(help="NAME:VERSION, the production side.")],
    b: Annotated[str, typer.Argument(help="NAME:VERSION, the candidate.")],
    stream: Annotated[str, typer.Option("--stream", help="The stream they ran on.")],
    png: Annotated[Path | None, typer.Option("--png", help="Also draw it to this PNG.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Two versions on the same live records: agreement, both confusion matrices, live
    accuracy with Wilson intervals and McNemar's exact test once labels arrived (before: the
    CBPE estimate)."""
    from headrace.ops.rollout import compare_png
    from headrace.ops.rollout.live_evidence import compare as live_compare

    (na, va), (nb, vb) = _ref(a), _ref(b)
    if na != nb:
        raise ValidationFailed(f"compare two versions of one model, not {na} and {nb}")
    ev = live_compare(_context.connection(ctx), _context.control_topics(ctx), stream=stream,
                      name=na, a=va, b=vb)
    if png is not None:
        compare_png.render(ev, png)
    if as_json:
        console.print_json(json.dumps(ev.as_dict()))
        return
    for line in compare_png.summary_lines(ev):
        console.print(line)
    panels = [(ev.matrix, f"v{va} \\ v{vb}")]
    if ev.labelled:
        panels += [(ev.production_truth, f"truth \\ v{va}"),
                   (ev.candidate_truth, f"truth \\ v{vb}")]
    for m, corner in panels:
        table = Table(corner, *ev.classes)
        for cls, row in zip(ev.classes, m.tolist(), strict=True):
            table.add_row(cls, *map(str, row))
        console.print(table)
    if png is not None:
        console.print(f"image: {png}")


def promote_on_live_gate(ctx: typer.Context, ref: str, *, stream: str | None,
                         topics: ControlTopics) -> None:
    """``models promote --if-live-gate``: promote, or refuse with one line per reason."""
    from headrace.ops.rollout.live_evidence import promote_if_live_gate

    name, sep, _ = ref.partition(":")
    version: int | None = None
    if sep or stream is None:  # NAME alone with --stream: the stream's rollout candidate
        name, version = _ref(ref)
    d = promote_if_live_gate(root=_context.settings(ctx).dfs_root, conn=_context.connection(ctx),
                             topics=topics, name=name, version=version, stream=stream)
    version = d.version
    head = (f"{name}:{version} is production (was {d.production_version}): live gate held on "
            f"{d.stream}" if d.promoted else
            f"{name}:{version} not promoted: live gate failed on {d.stream} against production "
            f"v{d.production_version}")
    typer.echo(head)
    for line in d.reasons():
        typer.echo(f"  {line}", err=not d.promoted)
    if not d.promoted:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")
