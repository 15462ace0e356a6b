"""htmlreport: the self-contained HTML accuracy report of attncheck.

    inputs.py    reads JSON Lines of `attncheck fuzz|run|check|prove --json`,
                 `attncheck bench` output and `ci/torch_sdpa_bench.py` output
    model.py     aggregates them: per kernel x dtype x output, failures,
                 detection power, environment
    charts.py    one function per matplotlib chart, each returning inline SVG
    page.py      the HTML page: sections with anchors, tables, inline CSS
    testdata.py  records in the harness's format with planted values (tests)

reports/html_report.py is the command line.
"""
