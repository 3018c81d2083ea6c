"""`tracegen plan JOB`: the dry run - per-accelerator byte volumes, counts, output size estimates and
where generate would write. Writes nothing."""
from __future__ import annotations

import click

from ..errors import ConfigError, OutputError
from ..timing.work import DEFAULT_MAX_WORK, estimate, parse_work
from .common import (check_environment, choose_target, fail, job_options, load, output_options, place,
                     pcap_options, print_tables, retime, run_job, stages)


@click.command("plan")
@job_options
@click.option("--corpus", metavar="PATH", help="Also size one epoch of this corpus (file, folder, or dante-it/dante-en).")
@click.option("--tokenizer", default=None, help="Tokenizer for --corpus (default cl100k_base).")
@click.option("--json", "as_json", is_flag=True, help="The plan as JSON on stdout (keys in the README).")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Where generate would write (default traces/<job name>): plan says what it would do there.")
@click.option("--scenario", "scenario_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="Several jobs on one fabric, with events (a scenario file; README: Scenarios): per job "
                   "its time beside the same job alone.")
@output_options
def plan(job_file, preset, sets, detail, corpus, tokenizer, as_json, out_dir, force, max_work, scenario_file):
    """Dry run: per-accelerator byte volumes, counts and output size estimates. Writes nothing."""
    try:
        if scenario_file:
            return _plan_scenario(scenario_file, job_file or preset or sets or detail or corpus or out_dir,
                                  as_json, max_work)
        job = retime(pcap_options(load(job_file, preset, sets, detail)))
        check_environment()
        if tokenizer is not None and not corpus:    # it would change nothing: say so, as inert keys
            raise ConfigError("--tokenizer sizes the corpus of --corpus, and none is given; "
                              "add --corpus PATH or drop --tokenizer")
        tokenizer = tokenizer or "cl100k_base"
        if corpus:                          # a missing corpus or tokenizer: before any work
            from ..corpus.reader import open_corpus
            from ..corpus.tokenizers import resolve_tokenizer
            open_corpus(corpus)
            resolve_tokenizer(tokenizer)
        try:
            from ..timing.alltoall_agg import check_generate
            check_generate(job)             # AllToAlls timed per sender: generate refuses (per-pair outputs)
            target = choose_target(out_dir, job, job_file, force)
            where = f"generate would write {target.shown}/ ({target.note})"
            output = {"dir": target.shown, "generate": "write", "note": target.note}
        except (OutputError, ConfigError) as e:
            where = f"generate would refuse: {e}"
            output = {"dir": place.choose(out_dir, job.output.dir, job.name)[1], "generate": "refuse",
                      "note": str(e)}
        with stages(as_json) as stage:
            stage("work estimate: the job's collectives")
            estimate(job, parse_work(max_work) if max_work is not None else DEFAULT_MAX_WORK, pcap=True, emit=False)
        run = run_job(job, as_json, budget=False)
        corpus_doc, corpus_lines = None, []
        if corpus:                          # read whole (a bad byte is an error) before anything is printed
            from ..corpus.traffic import corpus_plan, corpus_plan_lines
            corpus_doc = corpus_plan(job, corpus, tokenizer, report=run.report)
            corpus_lines = corpus_plan_lines(job, corpus, tokenizer, doc=corpus_doc)
        if as_json:                         # every flag has its key: -o/--force "output", --corpus "corpus"
            import json
            from ..report.plan_json import plan_json
            doc = {**plan_json(run), "output": output}
            if corpus_doc is not None:
                doc["corpus"] = corpus_doc
            click.echo(json.dumps(doc, indent=1))
            return
        _print_plan(run)
        for note in run.report.notes:
            click.echo(f"warning: {note}", err=True)
        click.echo(where)
        for line in corpus_lines:
            click.echo(line)
    except (ConfigError, OutputError) as e:
        fail(e)


def _plan_scenario(path, other, as_json, max_work) -> None:
    """`plan --scenario FILE`: the jobs' times in the scenario and alone, the fairness."""
    from ..scenario import report, run, spec
    if other:
        raise ConfigError("--scenario FILE takes no job, --preset, --set, --detail, --corpus or -o: "
                          "the scenario file names its jobs")
    sc = spec.load_scenario(path)
    prepared = run.prepare(sc)
    with stages(as_json) as stage:
        stage("work estimate: the jobs' collectives")
        run.check_work(sc, parse_work(max_work) if max_work is not None else DEFAULT_MAX_WORK)
    with stages(as_json) as stage:
        done = run.run_scenario(sc, stage, prepared=prepared)
    if as_json:
        import json
        click.echo(json.dumps(report.scenario_json(done), indent=1))
        return
    print_tables(report.scenario_tables(done))


def _print_plan(run) -> None:
    """The plan's tables, made to fit 100 columns: numbers right-aligned and never wrapped, the
    per-NIC bytes summarised (sum / min / median / max and the busiest NICs). Into a pipe or a
    file (no terminal width to respect) each table is as wide as it needs: nothing is cut."""
    from rich.console import Console
    from ..report.render import report_tables
    console = Console()
    if not console.is_terminal:
        console = Console(width=100)
    names = [run.fabric.nic_name(i) for i in range(run.fabric.n_nics)]
    print_tables(report_tables(run.report, exact=False, nic_names=names), console)
