// dashboard-validate: strict validation of Grafana dashboard JSON files with Grafana's own typed model
// (github.com/grafana/grafana-foundation-sdk/go, pinned in go.mod). A field the schema does not know, a
// required field that is missing, or a value of the wrong type fails: the same check Grafana's Go SDK applies.
//
//	dashboard-validate FILE.json...   exit 0 when every file is valid, 1 otherwise (one line per error)
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// failed: the SDK's strict decoders return their (possibly empty) error list as an `error`, so an empty
// cog.BuildErrors is a non-nil error that means "no error".
func failed(err error) bool {
	var list cog.BuildErrors
	if errors.As(err, &list) {
		return len(list) > 0
	}
	return err != nil
}

func validate(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var d dashboard.Dashboard
	if err := d.UnmarshalJSONStrict(raw); failed(err) {
		return fmt.Errorf("does not match Grafana's dashboard schema:\n%w", err)
	}
	if err := d.Validate(); failed(err) {
		return fmt.Errorf("fails Grafana's dashboard validation:\n%w", err)
	}
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dashboard-validate FILE.json...")
		os.Exit(2)
	}
	// Panel options and queries are decoded (strictly) by their plugin's schema: stat, timeseries, prometheus...
	plugins.RegisterDefaultPlugins()
	failed := false
	for _, path := range os.Args[1:] {
		if err := validate(path); err != nil {
			failed = true
			fmt.Printf("%s: INVALID: %v\n", path, err)
			continue
		}
		fmt.Printf("%s: valid\n", path)
	}
	if failed {
		os.Exit(1)
	}
}
