"""Tests of reports/html_report.py: reading, aggregation, and the page, with
planted values found at their place.  Run from the repository root:

    python3 -m unittest discover -s reports/tests

(ci/test-html-report.sh runs them with Debian's python3, which has matplotlib.)
"""
import html.parser
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

REPORTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPORTS)

from htmlreport import inputs, model, testdata  # noqa: E402

SCRIPT = os.path.join(REPORTS, "html_report.py")
F16_U, F32_U = 2.0 ** -11, 2.0 ** -24


class Tables(html.parser.HTMLParser):
    """Every <table id=...> as rows of cell texts, and every id in the page."""

    def __init__(self, text: str):
        super().__init__()
        self.tables, self.ids, self._table, self._row, self._cell = {}, [], None, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "table":
            self._table = self.tables.setdefault(a.get("id"), [])
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self._table.append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def row(self, table_id: str, *first_cells) -> list:
        """The one row of a table that starts with these cells."""
        rows = [r for r in self.tables[table_id] if tuple(r[:len(first_cells)]) == first_cells]
        if len(rows) != 1:
            raise AssertionError("%d rows of #%s start with %r" % (len(rows), table_id, first_cells))
        return rows[0]


class TempDir(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, name: str, text: str) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def jsonl(self, name: str, records) -> str:
        return self.write(name, "".join(json.dumps(r) + "\n" for r in records))

    def script(self, *args):
        return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True, timeout=120)


class ReadingInputs(TempDir):
    def test_case_line_gives_the_shape_and_the_mask_kind(self):
        s = inputs.parse_case_line("v1 seed=9 b=2 hq=8 hkv=2 nq=300 nk=700 d=96 dtype=bf16 mask=window-br(6,1) "
                                   "layout=bhsd dist=normal(0,1) scale=auto")
        self.assertEqual((s.dtype, s.b, s.hq, s.hkv, s.nq, s.nk, s.d, s.mask_kind, s.seqlen),
                         ("bf16", 2, 8, 2, 300, 700, 96, "window-br", 700))
        self.assertIsNone(inputs.parse_case_line("check case/ --kernel mine"))

    def test_a_v1_line_without_dtype_is_refused_naming_the_field(self):
        path = self.jsonl("a.jsonl", [testdata.case_record("k", "v1 seed=1 b=1 hq=1 hkv=1 nq=1 nk=1 d=1", {})])
        with self.assertRaises(inputs.InputError) as e:
            inputs.read_inputs([path])
        self.assertEqual(str(e.exception), "%s:1: case line has dtype=None, expected f32, f16, bf16, e4m3 or e5m2" % path)

    def test_malformed_json_names_file_and_line(self):
        good = json.dumps(testdata.case_record("k", testdata.case_line(), {"O": testdata.metrics()}))
        path = self.write("bad.jsonl", good + "\n\n" + good[:40] + "\n")
        with self.assertRaises(inputs.InputError) as e:
            inputs.read_inputs([path])
        self.assertTrue(str(e.exception).startswith("%s:3: not valid JSON" % path), str(e.exception))

    def test_a_metric_that_is_not_a_number_is_named(self):
        rec = testdata.case_record("k", testdata.case_line(), {"dQ": testdata.metrics()})
        rec["outputs"]["dQ"]["max_scaled"] = "big"
        path = self.jsonl("m.jsonl", [rec])
        with self.assertRaises(inputs.InputError) as e:
            inputs.read_inputs([path])
        self.assertEqual(str(e.exception), "%s:1: outputs.dQ.max_scaled is 'big', not a number" % path)

    def test_a_record_that_is_not_an_object_is_refused(self):
        path = self.write("l.jsonl", "[1, 2]\n")
        with self.assertRaises(inputs.InputError) as e:
            inputs.read_inputs([path])
        self.assertEqual(str(e.exception), "%s:1: a record must be a JSON object, this is list" % path)

    def test_nonfinite_metrics_travel_as_strings(self):
        rec = testdata.case_record("k", testdata.case_line(), {"O": testdata.metrics()})
        rec["outputs"]["O"]["vs_naive_max"] = "inf"
        rec["outputs"]["O"]["max_scaled"] = "nan"
        data = inputs.read_inputs([self.jsonl("n.jsonl", [rec])])
        o = data.cases[0].outputs["O"]
        self.assertEqual(o["vs_naive_max"], math.inf)
        self.assertTrue(math.isnan(o["max_scaled"]))

    def test_unknown_record_types_are_skipped_with_a_note(self):
        recs = [{"type": "history", "release": "0.3"}, testdata.case_record("k", testdata.case_line(), {}),
                testdata.environment(gpu="G")]
        path = self.jsonl("u.jsonl", recs)
        data = inputs.read_inputs([path])
        self.assertEqual(data.notes, ["%s:1: skipped a record of unknown type 'history'" % path])
        self.assertEqual((len(data.cases), data.environments[0].fields), (1, {"gpu": "G"}))
        self.assertEqual(data.files[0].records, 2)

    def test_empty_and_missing_files(self):
        for name, text in (("empty.jsonl", ""), ("blank.jsonl", "\n  \n")):
            path = self.write(name, text)
            with self.assertRaises(inputs.InputError) as e:
                inputs.read_inputs([path])
            self.assertEqual(str(e.exception), "%s: empty: no records" % path)
        missing = os.path.join(self.dir, "nope.jsonl")
        with self.assertRaises(inputs.InputError) as e:
            inputs.read_inputs([missing])
        self.assertEqual(str(e.exception), "%s: no such file" % missing)

    def test_the_h100_bench_file(self):
        data = inputs.read_inputs([os.path.join(REPORTS, "h100-bench.txt")])
        bench = data.benches[0]
        self.assertEqual((len(bench.speed), len(bench.memory)), (96, 5))
        self.assertEqual(bench.device, "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)")
        row = [r for r in bench.speed if (r.direction, r.dtype, r.d, r.causal, r.n) == ("fwd", "f16", 128, 0, 16384)]
        self.assertEqual((row[0].ms, row[0].tflops, row[0].batch, row[0].heads), (4.412, 498.4, 1, 16))
        self.assertEqual(bench.memory[-1].n, 16384)
        self.assertEqual(bench.memory[-1].naive_mib, 24833.0)

    def test_the_h100_torch_file(self):
        run = inputs.read_inputs([os.path.join(REPORTS, "h100-torch-sdpa.txt")]).torch_runs[0]
        self.assertEqual((run.torch_version, run.backend_names, len(run.rows)),
                         ("2.11.0+cu130", ["flash", "cudnn"], 96))
        last = run.rows[-1]
        self.assertEqual((last.direction, last.dtype, last.d, last.causal, last.n), ("bwd", "bf16", 128, 1, 16384))
        self.assertEqual((last.ours_tflops, last.backends["flash"], last.backends["cudnn"]),
                         (312.8, (300.9, 1.04), (549.9, 0.57)))

    def test_a_bad_bench_row_names_its_line_and_an_oom_row_is_kept(self):
        text = testdata.bench_text([("fwd", "f16", 64, 0, 512, 0.2, 312.5)],
                                   memory=[(1024, 0.033, 0.181, 5.5, 16.1, 112.1, 7.0)])
        oom = self.write("oom.txt", text + "16384         4.551          OOM   (naive: out of memory)\n")
        self.assertEqual(inputs.read_inputs([oom]).benches[0].memory[1].note, "naive: out of memory")
        lines = text.splitlines()
        lines[4] = lines[4][:20]                          # the speed row, cut short
        bad = self.write("bench.txt", "\n".join(lines) + "\n")
        with self.assertRaises(inputs.InputError) as e:
            inputs.read_inputs([bad])
        self.assertTrue(str(e.exception).startswith("%s:5: bad speed row: expected 9 columns" % bad),
                        str(e.exception))

    def test_generator_matches_the_harness_record(self):
        real = os.environ.get("ATTNCHECK_HTML_REAL_JSONL")
        if not real:
            self.skipTest("ATTNCHECK_HTML_REAL_JSONL not set (ci/test-html-report.sh sets it)")
        with open(real) as f:  # the first case record: an environment record comes before it
            rec = next(r for r in map(json.loads, f) if "type" not in r)
        mine = testdata.case_record("k", testdata.case_line(), {"O": testdata.metrics()})
        self.assertEqual(list(mine), [k for k in rec if k != "minimal"])
        self.assertEqual(list(mine["certification"]), list(rec["certification"]))
        self.assertEqual(list(mine["outputs"]["O"]), list(next(iter(rec["outputs"].values()))))


def read(records) -> model.Model:
    data = inputs.Inputs()
    for i, r in enumerate(records, 1):
        inputs._json_record(r, "t.jsonl:%d" % i, data)
    return model.build(data)


class Aggregating(unittest.TestCase):
    def test_mean_scaled_uses_the_dtype_u_and_f32_for_lse(self):
        outs = {"O": testdata.metrics(mean_abs=3 * F16_U, naive_mean_abs=5 * F16_U, mean_escale=2.0),
                "LSE": testdata.metrics(mean_abs=3 * F32_U, naive_mean_abs=7 * F32_U, mean_escale=2.0)}
        m = read([testdata.case_record("k", testdata.case_line(dtype="f16"), outs)])
        o, lse = m.groups[("k", "f16", "O")].samples[0], m.groups[("k", "f16", "LSE")].samples[0]
        self.assertEqual((o.mean_scaled, o.naive_mean_scaled), (1.5, 2.5))
        self.assertEqual((lse.mean_scaled, lse.naive_mean_scaled), (1.5, 3.5))

    def test_the_worst_value_is_found_with_its_case(self):
        recs = testdata.campaign("cpu-flash", 40, seed=3)
        planted = testdata.case_record("cpu-flash", testdata.case_line(seed=77, dtype="bf16"),
                                       {"dQ": testdata.metrics(max_scaled=123.4)})
        recs.insert(17, planted)
        g = read(recs).groups[("cpu-flash", "bf16", "dQ")]
        value, at = g.worst("max_scaled")
        self.assertEqual((value, at.case.line, at.case.source), (123.4, planted["case"], "t.jsonl:18"))

    def test_detection_counts_cases_to_the_first_catch(self):
        line = testdata.case_line()
        recs = testdata.campaign("cpu-flash", 5, seed=1) + testdata.campaign("cpu-flash-mutant-a", 3, seed=2) + \
            [testdata.failing_case("cpu-flash-mutant-a", line, "v1 small")] + \
            testdata.campaign("cpu-flash-mutant-a", 2, seed=4) + testdata.campaign("cpu-flash-mutant-b", 6, seed=5)
        m = read(recs)
        a, b = m.detection
        self.assertEqual((a.mutant, a.base, a.cases_run, a.first_catch, a.caught_case.minimal),
                         ("cpu-flash-mutant-a", "cpu-flash", 6, 4, "v1 small"))
        self.assertEqual((b.first_catch, b.cases_run), (None, 6))
        self.assertEqual((m.subjects, m.base_clean("cpu-flash"), m.verdict()), (["cpu-flash"], True, "fail"))

    def test_verdict_pass_warn_fail(self):
        good = testdata.campaign("cpu-flash", 4, seed=1)
        self.assertEqual(read(good).verdict(), "pass")
        uncertified = testdata.case_record("cpu-flash", testdata.case_line(), {"O": testdata.metrics()},
                                           certified=False)
        self.assertEqual(read(good + [uncertified]).verdict(), "warn")
        failing = testdata.failing_case("cpu-flash", testdata.case_line(), "v1 x")
        self.assertEqual(read(good + [failing]).verdict(), "fail")
        self.assertEqual(read([]).verdict(), "none")

    def test_shape_series_bins_by_octave(self):
        def case(nq, d, max_scaled, mean_abs):
            return testdata.case_record("k", testdata.case_line(nq=nq, nk=nq, d=d, dtype="f16"),
                                        {"O": testdata.metrics(max_scaled=max_scaled, mean_abs=mean_abs * F16_U,
                                                               mean_escale=1.0)})
        g = read([case(100, 32, 0.5, 0.1), case(70, 40, 2.0, 0.3), case(300, 64, 0.25, 0.2)]).groups[("k", "f16", "O")]
        seq = [(p.key, p.cases, p.max_of_max_scaled, round(p.mean_of_mean_scaled, 12))
               for p in model.shape_series(g, "seqlen")]
        self.assertEqual(seq, [(64, 2, 2.0, 0.2), (256, 1, 0.25, 0.2)])
        dims = [(p.key, p.cases) for p in model.shape_series(g, "head_dim")]
        self.assertEqual(dims, [(32, 2), (64, 1)])

    def test_environment_shows_what_is_recorded(self):
        env = testdata.environment(gpu="NVIDIA H100", seed=7, budgets_version=1, extra_field="x")
        rows = {r.label: r.values for r in model.environment(read([env] + testdata.campaign("k", 3, seed=1)))}
        self.assertEqual(rows["GPU"], [("NVIDIA H100", "t.jsonl:1")])
        self.assertEqual((rows["Seeds"], rows["Budgets version"], rows["Driver"]),
                         ([("7", "t.jsonl:1")], [("1", "t.jsonl:1")], []))
        self.assertEqual(rows["extra_field"], [("x", "t.jsonl:1")])
        self.assertEqual(rows["Certification rate"][0][0],
                         "3 of 3 cases (100.0%) with every sampled row certified against MPFR")


class Charts(unittest.TestCase):
    def test_a_long_cdf_is_thinned_keeping_both_ends(self):
        from htmlreport import charts
        self.assertEqual(charts._thinned(5), [0, 1, 2, 3, 4])
        kept = charts._thinned(21060)
        self.assertEqual((len(kept), kept[0], kept[-1]), (charts.ECDF_MAX_STEPS, 0, 21059))

    def test_svg_ids_are_prefixed_and_every_reference_resolves(self):
        from htmlreport import charts
        m = read(testdata.campaign("cpu-flash", 12, seed=2, dtypes=("f16",)))
        svg = charts.error_distribution("cpu-flash", "f16", m.groups_of("cpu-flash", "f16"), "fig7")
        ids = re.findall(r'\bid="([^"]+)"', svg)
        refs = re.findall(r'(?:url\(#|href="#)([^")]+)', svg)
        self.assertTrue(ids and refs)
        self.assertEqual([i for i in ids if not i.startswith("fig7-")], [])
        self.assertEqual(set(refs) - set(ids), set())
        self.assertTrue(svg.startswith('<svg role="img" '))


class ThePage(TempDir):
    @classmethod
    def setUpClass(cls):
        """One report built from the sample inputs plus a planted failure."""
        cls._dir = tempfile.TemporaryDirectory()
        d = cls._dir.name
        testdata.write_sample(d)
        cls.minimal = testdata.case_line(seed=3, hq=1, nq=1, nk=71, d=2, dtype="f16")
        fail = testdata.failing_case("cpu-flash", testdata.case_line(seed=41, nq=300, dtype="f16"), cls.minimal,
                                     max_scaled=0.0123e5, output="dV")
        with open(os.path.join(d, "fail.jsonl"), "w") as f:
            f.write(json.dumps(fail) + "\n")
        cls.out = os.path.join(d, "report.html")
        files = [os.path.join(d, n) for n in ("campaign.jsonl", "prove.jsonl", "fail.jsonl", "bench.txt",
                                              "torch.txt")]
        cls.proc = subprocess.run([sys.executable, SCRIPT, "--out", cls.out, "--title", "T & <test>"] + files,
                                  capture_output=True, text=True, timeout=300)
        with open(cls.out, encoding="utf-8") as f:
            cls.text = f.read()
        cls.page = Tables(cls.text)

    @classmethod
    def tearDownClass(cls):
        cls._dir.cleanup()

    def test_it_says_what_it_wrote(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        self.assertRegex(self.proc.stdout, r"wrote .*report\.html \(\d+ KiB, 145 case records\): FAIL")
        self.assertIn("<title>T &amp; &lt;test&gt;</title>", self.text)

    def test_verdict_and_kernel_counts(self):
        self.assertRegex(self.text, r'<div class="verdict fail" id="verdict">FAIL</div>')
        self.assertEqual(self.page.row("kernels-table", "cpu-flash")[1:6], ["141", "140", "1", "0", "0"])

    def test_planted_failure_is_listed_with_its_replay_command(self):
        cmd = "attncheck run --kernel cpu-flash --case '%s'" % self.minimal
        self.assertIn("<pre class=\"cmd\">%s</pre>" % cmd.replace("'", "&#x27;"), self.text)
        self.assertEqual(self.page.row("failure-kinds-table", "cpu-flash"), ["cpu-flash", "dV:scaled", "1"])

    def test_overview_shows_the_worst_at_its_place(self):
        row = self.page.row("overview-table", "cpu-flash", "f16", "dV")
        self.assertEqual(row[4], "1.23e+03")
        for other in ("O", "dQ"):
            self.assertNotEqual(self.page.row("overview-table", "cpu-flash", "f16", other)[4], "1.23e+03")

    def test_detection_table(self):
        row = self.page.row("detection-table", "cpu-flash-mutant-no-rescale-o")
        self.assertEqual(row[1:5], ["cpu-flash (NOT clean)", "yes", "4", "O:scaled"])

    def test_environment_rows(self):
        self.assertEqual(self.page.row("environment-table", "Commit")[1], "0123abc")
        self.assertEqual(self.page.row("environment-table", "Driver")[1], "not recorded")
        self.assertEqual(self.page.row("environment-table", "Seeds")[1], "7")

    def test_speed_table_has_the_torch_ratios(self):
        row = self.page.row("speed-table", "f16", "128", "0", "1024")
        self.assertEqual(row[4:10], ["402", "309", "1.30", "502", "0.80", "281"])

    def test_every_section_and_chart_is_there(self):
        for i in ("summary", "environment", "overview", "distributions", "shape", "special", "failures",
                  "detection", "speed", "chart-dist-cpu-flash-f32", "chart-dist-cpu-flash-f16",
                  "chart-dist-cpu-flash-bf16", "chart-shape-cpu-flash", "chart-speed", "memory-table"):
            self.assertIn(i, self.page.ids)
        self.assertEqual(self.text.count("<svg "), 5)

    def test_the_page_needs_nothing_outside_it(self):
        self.assertIn("Content-Security-Policy\" content=\"default-src 'none'", self.text)
        self.assertNotRegex(self.text, r"<(script|link|iframe|img|object)\b")
        self.assertNotRegex(self.text, r"\bsrc=")
        self.assertEqual(set(re.findall(r'\bhref="(.)', self.text)), {"#"})
        urls = set(re.findall(r"https?://[^\s\"')]+", self.text))
        self.assertEqual(urls, {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"})   # namespaces

    def test_svg_ids_are_unique_in_the_page(self):
        ids = self.page.ids
        self.assertEqual(len(ids), len(set(ids)), [i for i in set(ids) if ids.count(i) > 1][:5])


class CommandLine(TempDir):
    def test_bench_output_alone_gives_a_speed_report(self):
        out = os.path.join(self.dir, "r.html")
        p = self.script("--out", out, os.path.join(REPORTS, "h100-bench.txt"))
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out) as f:
            page = Tables(f.read())
        self.assertEqual([i for i in page.ids if i in ("summary", "environment", "overview", "failures", "speed",
                                                       "chart-speed", "speed-table", "memory-table")],
                         ["summary", "environment", "speed", "chart-speed", "speed-table", "memory-table"])
        self.assertEqual(page.row("speed-table", "bf16", "64", "1", "512")[4:6], ["182", "78.5"])
        self.assertEqual(page.row("memory-table", "8192")[1:4], ["1.11", "8.34", "7.5"])

    def test_bad_inputs_exit_2_with_file_and_line(self):
        good = json.dumps(testdata.case_record("k", testdata.case_line(), {"O": testdata.metrics()}))
        cases = [("bad.jsonl", good + "\n{\"kernel\": \n", ":2: not valid JSON"),
                 ("empty.jsonl", "", ": empty: no records"),
                 ("text.txt", "hello\n", ":1: not attncheck JSON Lines")]
        for name, text, message in cases:
            path = self.write(name, text)
            p = self.script("--out", os.path.join(self.dir, "r.html"), path)
            self.assertEqual((p.returncode, p.stdout), (2, ""), p.stderr)
            self.assertTrue(p.stderr.startswith("html_report: %s%s" % (path, message)), p.stderr)
            self.assertNotIn("Traceback", p.stderr)
        missing = os.path.join(self.dir, "missing.jsonl")
        p = self.script("--out", os.path.join(self.dir, "r.html"), missing)
        self.assertEqual((p.returncode, p.stderr), (2, "html_report: %s: no such file\n" % missing))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "r.html")))

    def test_usage_errors_exit_2(self):
        p = self.script(os.path.join(self.dir, "x.jsonl"))          # no --out
        self.assertEqual(p.returncode, 2)
        self.assertIn("the following arguments are required: --out", p.stderr)
        path = self.jsonl("a.jsonl", testdata.campaign("k", 2, seed=1))
        p = self.script("--out", os.path.join(self.dir, "no", "such", "dir", "r.html"), path)
        self.assertEqual(p.returncode, 2)
        self.assertRegex(p.stderr, r"^html_report: cannot write .*r\.html: ")

    def test_an_internal_error_is_one_line_and_exit_3(self):
        import contextlib
        import io
        from unittest import mock
        import html_report
        path = self.jsonl("a.jsonl", testdata.campaign("k", 2, seed=1))
        err = io.StringIO()
        with mock.patch("htmlreport.page.build_page", side_effect=RuntimeError("planted")), \
                contextlib.redirect_stderr(err):
            rc = html_report.main(["--out", os.path.join(self.dir, "r.html"), path])
        self.assertEqual(rc, 3)
        self.assertRegex(err.getvalue(), r"^html_report: internal error: RuntimeError: planted \(at html_report\.py:\d+\)\n$")

    def test_an_unknown_record_is_noted_on_stderr_and_in_the_report(self):
        path = self.jsonl("u.jsonl", [{"type": "baseline-pair"}] + testdata.campaign("k", 3, seed=1))
        out = os.path.join(self.dir, "r.html")
        p = self.script("--out", out, path)
        self.assertEqual(p.returncode, 0, p.stderr)
        note = "%s:1: skipped a record of unknown type 'baseline-pair'" % path
        self.assertEqual(p.stderr, "html_report: note: %s\n" % note)
        with open(out) as f:
            self.assertIn("<li>%s</li>" % note.replace("'", "&#x27;"), f.read())


if __name__ == "__main__":
    unittest.main()
