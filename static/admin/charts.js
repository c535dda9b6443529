// The overview's live charts: uPlot (static/admin/vendor/, `make admin-assets`), one chart per
// measure, its x axis the series' minutes. Each refresh hands the chart the hour's new series
// (setData): the chart moves in place, with no reload and no flicker of a new canvas.

// Imported when the overview first shows, not with the page: without `make admin-assets` the
// import fails, and the dashboard still works, with a note where the charts would be.
let uPlotModule = null;
export async function loadCharts() {
  uPlotModule ||= import("./vendor/uPlot.esm.js").then((m) => m.default);
  try {
    return await uPlotModule;
  } catch (err) {
    uPlotModule = null;
    throw err;
  }
}

const HEIGHT = 200;
// Colours that hold 3:1 against both schemes' backgrounds; the legend names each series too.
const COLOURS = ["#2f7ed8", "#1a9b55", "#d6453d", "#b7791f"];

function themed() {
  const style = getComputedStyle(document.documentElement);
  return { text: style.getPropertyValue("--muted").trim(), grid: style.getPropertyValue("--border").trim() };
}

export class LiveChart {
  // series: [{ key, label, dash? }] read from the overview's `series` object by key; `floor`:
  // the least top of the y axis (an empty hour still has a scale); `points`: draw each minute's
  // point, for series with gaps (null: nothing measured), where a minute alone between empty
  // ones has no line to either side and would not show at all.
  constructor(uPlot, container, { title, series, unit, floor = 1, points = false }) {
    this.container = container;
    this.series = series;
    this.unit = unit;
    const colours = themed();
    const axis = { stroke: colours.text, grid: { stroke: colours.grid, width: 1 }, ticks: { stroke: colours.grid } };
    const format = (_, value) => (value === null || value === undefined ? "–" : `${+value.toFixed(2)}${unit}`);
    this.plot = new uPlot(
      {
        title,
        width: this.width(),
        height: HEIGHT,
        scales: { y: { range: (_, min, max) => [0, Math.max(floor, max * 1.1)] } },
        axes: [{ ...axis }, { ...axis, size: 56, values: (_, ticks) => ticks.map((t) => `${+t.toFixed(2)}${unit}`) }],
        series: [
          {},
          ...series.map((s, i) => ({
            label: s.label, stroke: COLOURS[i % COLOURS.length], width: 2, dash: s.dash,
            spanGaps: false, value: format, points: { show: points, size: 5 },
          })),
        ],
      },
      [[], ...series.map(() => [])],
      container,
    );
    // For a console, and for the browser test that checks the charts move: the drawn data.
    container.uplot = this.plot;
    this.resizer = new ResizeObserver(() => this.plot.setSize({ width: this.width(), height: HEIGHT }));
    this.resizer.observe(container);
  }

  width() {
    return Math.max(240, Math.floor(this.container.clientWidth || 600));
  }

  update(overviewSeries) {
    const minutes = (overviewSeries.minutes || []).map((iso) => Date.parse(iso) / 1000);
    const data = [minutes, ...this.series.map(({ key }) => (overviewSeries[key] || []).map((v) => (v === undefined ? null : v)))];
    this.plot.setData(data);
    this.container.dataset.points = String(minutes.length);
  }
}
