/**
 * The one Prometheus text writer (src/http/prometheus.ts), read back by a strict parser of the
 * format (test/helpers/prometheusText.ts), and that parser's own refusals.
 */
import { describe, expect, test } from "bun:test";
import { escapeLabelValue, LabeledCounter, LabeledHistogram, labelText, metricFamily, sampleValue, singleMetric } from "../../src/http/prometheus.ts";
import { parsePrometheusText, PrometheusFormatError } from "../helpers/prometheusText.ts";

const AWKWARD = 'a"b\\c\nd \\n "}{,=';

describe("writer", () => {
  test("counters and cumulative histograms in the text format, label values escaped", () => {
    const counter = new LabeledCounter("x_total", "Things.");
    counter.inc({ route: 'a"b\\c\nd' });
    counter.inc({ route: 'a"b\\c\nd' }, 2);
    expect(counter.render()).toBe('# HELP x_total Things.\n# TYPE x_total counter\nx_total{route="a\\"b\\\\c\\nd"} 3\n');

    const histogram = new LabeledHistogram("d_seconds", "Durations.", [0.1, 1]);
    histogram.observe({ route: "/r" }, 0.05);
    histogram.observe({ route: "/r" }, 0.5);
    histogram.observe({ route: "/r" }, 5);
    expect(histogram.render()).toBe(
      "# HELP d_seconds Durations.\n# TYPE d_seconds histogram\n" +
        'd_seconds_bucket{route="/r",le="0.1"} 1\n' +
        'd_seconds_bucket{route="/r",le="1"} 2\n' +
        'd_seconds_bucket{route="/r",le="+Inf"} 3\n' +
        'd_seconds_sum{route="/r"} 5.55\n' +
        'd_seconds_count{route="/r"} 3\n',
    );
  });

  test("label values with backslashes, quotes and line feeds read back as they were", () => {
    expect(escapeLabelValue('\\"\n')).toBe('\\\\\\"\\n');
    const counter = new LabeledCounter("odd_total", "Help with a \\ backslash\nand a line feed.");
    counter.inc({ route: AWKWARD, method: "" });
    const histogram = new LabeledHistogram("odd_seconds", "Durations.", [1]);
    histogram.observe({ upstream: AWKWARD }, 2);
    const text = counter.render() + histogram.render() + metricFamily("odd_gauge", "gauge", "By label.", [{ labels: { by: AWKWARD }, value: 1 }]);
    const families = parsePrometheusText(text);
    expect(families.get("odd_total")!.help).toBe("Help with a \\ backslash\nand a line feed.");
    expect(families.get("odd_total")!.samples[0]!.labels).toEqual({ route: AWKWARD, method: "" });
    expect(families.get("odd_seconds")!.samples.map((s) => s.labels)).toEqual([
      { upstream: AWKWARD, le: "1" },
      { upstream: AWKWARD, le: "+Inf" },
      { upstream: AWKWARD },
      { upstream: AWKWARD },
    ]);
    expect(families.get("odd_gauge")!.samples[0]!.labels.by).toBe(AWKWARD);
  });

  test("special values are Prometheus numbers; a histogram always has its +Inf bucket", () => {
    expect([NaN, Infinity, -Infinity, 0, 1.5, 1e21].map(sampleValue)).toEqual(["NaN", "+Inf", "-Inf", "0", "1.5", "1e+21"]);
    const text = singleMetric("a", "gauge", "A.", Infinity) + singleMetric("b", "gauge", "B.", NaN) + singleMetric("c", "gauge", "C.", -Infinity);
    const families = parsePrometheusText(text);
    expect(families.get("a")!.samples[0]!.value).toBe(Infinity);
    expect(families.get("b")!.samples[0]!.value).toBeNaN();
    expect(families.get("c")!.samples[0]!.value).toBe(-Infinity);

    const unobserved = new LabeledHistogram("h_seconds", "H.", []);
    unobserved.start({});
    unobserved.observe({}, 10);
    expect(unobserved.render()).toContain('h_seconds_bucket{le="+Inf"} 1\n');
    expect(parsePrometheusText(unobserved.render()).get("h_seconds")!.type).toBe("histogram");
  });

  test("names that are not Prometheus names and bucket bounds that are not increasing are refused", () => {
    expect(() => singleMetric("1bad", "gauge", "x", 1)).toThrow("invalid metric name");
    expect(() => new LabeledCounter("has-dash", "x")).toThrow("invalid metric name");
    expect(() => labelText({ "bad-label": "x" })).toThrow("invalid label name");
    expect(() => labelText({ __reserved: "x" })).toThrow("invalid label name");
    expect(() => new LabeledHistogram("h", "x", [1, 1])).toThrow("increasing");
    expect(() => new LabeledHistogram("h", "x", [1, Infinity])).toThrow("increasing");
  });
});

describe("strict parser", () => {
  const refuses = (text: string, problem: string) => expect(() => parsePrometheusText(text)).toThrow(problem);

  test("reads families, types, help, labels and values", () => {
    const families = parsePrometheusText('# a comment\n# HELP x_total X.\n# TYPE x_total counter\nx_total{a="1",b="q\\"r"} 2\nx_total{a="2"} 3 1700000000000\n\ny 1.5e3\n');
    expect(families.get("x_total")!.type).toBe("counter");
    expect(families.get("x_total")!.samples.map((s) => [s.labels, s.value])).toEqual([
      [{ a: "1", b: 'q"r' }, 2],
      [{ a: "2" }, 3],
    ]);
    expect(families.get("y")).toMatchObject({ type: "untyped", help: null });
    expect(families.get("y")!.samples[0]!.value).toBe(1500);
  });

  test("refuses what Prometheus would not read", () => {
    refuses("x 1", "end with a line feed");
    refuses('x{a="b"c"} 1\n', "expected , or }");
    refuses('x{a="b\\t"} 1\n', "unknown escape");
    refuses('x{a="b} 1\n', "unterminated");
    refuses("x{a=b} 1\n", 'expected ="');
    refuses('x{a="1",a="2"} 1\n', "given twice");
    refuses("x Infinity\n", "not a Prometheus number");
    refuses("x undefined\n", "not a Prometheus number");
    refuses("x  1\n", "expected");
    refuses("# TYPE x counter\n# TYPE x counter\nx 1\n", "a second TYPE");
    refuses("# TYPE x wibble\nx 1\n", "unknown type");
    refuses("x 1\n# TYPE x counter\n", "TYPE of x after its samples");
    refuses("x 1\ny 1\nx 2\n", "not together");
    refuses("x 1\nx 2\n", "appears twice");
    refuses("# TYPE x counter\nx -1\n", "counter x is -1");
  });

  test("refuses histograms without +Inf, not cumulative, or whose count is not the +Inf bucket", () => {
    const histogram = (buckets: string, count = 3) => `# TYPE h histogram\n${buckets}h_sum 1\nh_count ${count}\n`;
    expect(parsePrometheusText(histogram('h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 3\n')).get("h")!.samples).toHaveLength(4);
    refuses(histogram('h_bucket{le="1"} 1\nh_bucket{le="2"} 3\n'), 'no le="+Inf" bucket');
    refuses(histogram('h_bucket{le="1"} 2\nh_bucket{le="2"} 1\nh_bucket{le="+Inf"} 3\n'), "not cumulative");
    refuses(histogram('h_bucket{le="2"} 1\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 3\n'), "increasing le");
    refuses(histogram('h_bucket{le="+Inf"} 2\n'), "is not its +Inf bucket");
    refuses('# TYPE h histogram\nh_bucket{le="+Inf"} 1\n', "lacks _sum or _count");
  });

  test("is a PrometheusFormatError", () => {
    expect(() => parsePrometheusText("x y\n")).toThrow(PrometheusFormatError);
  });
});
