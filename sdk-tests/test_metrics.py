"""`/metrics` (OPS-4) read by Prometheus's own Python parser, the way a scraper reads it."""

import urllib.request

import openai
from prometheus_client.openmetrics.parser import text_string_to_metric_families


def scrape(gateway):
    with urllib.request.urlopen(f"{gateway.base}/metrics") as resp:
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
        return {f.name: f for f in text_string_to_metric_families(resp.read().decode())}


def count(families, name, **labels):
    return sum(
        s.value
        for s in families[name].samples
        if s.name.endswith(("_total", "_count")) and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_metrics_parse_strictly_and_count_calls(gateway):
    before = scrape(gateway)
    client = openai.OpenAI(base_url=f"{gateway.base}/v1", api_key=gateway.key, max_retries=0)
    resp = client.responses.with_raw_response.create(model="gpt-5.1-codex", input="hi")
    assert float(resp.headers["x-sublane-overhead-ms"]) >= 0
    after = scrape(gateway)

    assert after["sublane_admissions"].type == "counter"
    assert after["sublane_gateway_overhead_seconds"].type == "histogram"
    assert count(after, "sublane_admissions", outcome="admitted") == count(before, "sublane_admissions", outcome="admitted") + 1
    assert count(after, "sublane_upstream_responses", provider="codex", status="200") >= 1
    assert {s.labels["provider"] for s in after["sublane_account_info"].samples} >= {"codex", "claude", "antigravity"}
