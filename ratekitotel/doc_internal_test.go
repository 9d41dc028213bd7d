package ratekitotel

import (
	"os"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/internal/metricsview"
)

// TestDocTable checks the package documentation's table of instruments
// against the catalogue the instruments are made from: one row per metric,
// with its name, unit, instrument and Prometheus name.
func TestDocTable(t *testing.T) {
	src, err := os.ReadFile("ratekitotel.go")
	if err != nil {
		t.Fatal(err)
	}
	instrument := map[metricsview.Kind]string{
		metricsview.KindCounter:       "ObservableCounter",
		metricsview.KindUpDownCounter: "ObservableUpDownCounter",
		metricsview.KindGauge:         "ObservableGauge",
		metricsview.KindHistogram:     "Histogram",
	}
	rows := map[string][]string{}
	for line := range strings.Lines(string(src)) {
		if f := strings.Fields(strings.TrimPrefix(line, "//\t")); strings.HasPrefix(line, "//\tratekit.") && len(f) == 4 {
			rows[f[0]] = f
		}
	}
	for m := range metricsview.Metric(metricsview.NumMetrics) {
		info := m.Info()
		want := []string{info.OTel, info.Unit, instrument[info.Kind], info.Prom}
		if got := rows[info.OTel]; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("package doc row %q, want %q", strings.Join(got, " "), strings.Join(want, " "))
		}
		delete(rows, info.OTel)
	}
	for name := range rows {
		t.Errorf("package doc has a row for %s, which is no metric", name)
	}
}
