import { describe, expect, test } from "bun:test";
import { CHART_COLORS, lineChartSvg } from "../../../src/server/statusPage/lineChartSvg.ts";

const size = { width: 300, height: 160 };

function polylines(svg: string): number[][][] {
  return [...svg.matchAll(/<polyline [^>]*points="([^"]*)"/g)].map((match) => match[1]!.split(" ").map((point) => point.split(",").map(Number)));
}

describe("lineChartSvg", () => {
  test("one polyline per series, scaled to the largest value, left to right over the times", () => {
    const svg = lineChartSvg({ title: "Tokens", unit: "tokens", series: [{ name: "cached", values: [0, 50, 100] }, { name: "computed", values: [100, 100, 100] }] }, [0, 1000, 2000], size, CHART_COLORS);
    const [cached, computed] = polylines(svg);
    expect(cached!.map(([x]) => x)).toEqual([48, 170, 292]);
    const bottom = 160 - 36;
    const top = 24;
    expect(cached!.map(([, y]) => y)).toEqual([bottom, (top + bottom) / 2, top]);
    expect(computed!.every(([, y]) => y === top)).toBe(true);
    expect(svg).toContain(">100</text>"); // the y axis' top value
    expect(svg).toContain(">-2 s</text>");
    expect(svg).toContain(`stroke="${CHART_COLORS[1]}"`);
  });

  test("a null breaks the line; a lone point is a dot", () => {
    const svg = lineChartSvg({ title: "TTFT", unit: "ms", series: [{ name: "with reuse", values: [5, 6, null, 7] }] }, [0, 1, 2, 3], size, CHART_COLORS);
    expect(polylines(svg)).toHaveLength(1);
    expect(svg.match(/<circle /g)).toHaveLength(1);
  });

  test("says when there is nothing to draw", () => {
    expect(lineChartSvg({ title: "KV", unit: "blocks", series: [] }, [], size, CHART_COLORS)).toContain("not in this mode");
    expect(lineChartSvg({ title: "KV", unit: "blocks", series: [{ name: "used", values: [null] }] }, [0], size, CHART_COLORS)).toContain("no data yet");
  });

  test("names are escaped (upstream URLs are user input)", () => {
    const svg = lineChartSvg({ title: "<b>", unit: "u", series: [{ name: 'http://x/"><script>', values: [1, 2] }] }, [0, 1], size, CHART_COLORS);
    expect(svg).not.toContain("<script>");
    expect(svg).not.toContain("<b>");
    expect(svg).toContain("&#60;script&#62;");
  });
});
