package proxy

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
)

// Log formats the proxies write: kube-proxy's two.
const (
	logFormatText = "text"
	logFormatJSON = "json"
)

// loggingFlags are kube-proxy's logging flags (component-base's, as
// kube-proxy 1.37 registers them: -v/--v, --vmodule, --logging-format,
// --log-flush-frequency, --log-text-split-stream,
// --log-text-info-buffer-size), bound to config.
type loggingFlags struct {
	config *logsapi.LoggingConfiguration
	names  *flag.FlagSet // the logging flags alone, to tell them apart
}

func addLoggingFlags(fs *flag.FlagSet) *loggingFlags {
	l := &loggingFlags{config: logsapi.NewLoggingConfiguration(), names: flag.NewFlagSet("logging", flag.ContinueOnError)}
	logsapi.AddGoFlags(l.config, fs)
	logsapi.AddGoFlags(logsapi.NewLoggingConfiguration(), l.names)
	return l
}

// apply sets o.LogFormat from the logging flags, over the --config
// file's logging section (file, nil without one) as kube-proxy applies
// them: the flags given on the command line win over the file. It refuses
// what kube-proxy refuses, and what the proxies cannot honour.
func (l *loggingFlags) apply(fs *flag.FlagSet, file *logsapi.LoggingConfiguration, o *Options) error {
	c := l.config
	if file != nil {
		logsapi.SetRecommendedLoggingConfiguration(file)
		over := flag.NewFlagSet("file", flag.ContinueOnError)
		over.SetOutput(io.Discard)
		logsapi.AddGoFlags(file, over)
		var err error
		fs.Visit(func(f *flag.Flag) {
			if l.names.Lookup(f.Name) != nil && err == nil {
				err = over.Set(f.Name, f.Value.String())
			}
		})
		if err != nil {
			return err
		}
		c = file
	}
	if err := checkLogging(c); err != nil {
		return err
	}
	o.LogFormat = c.Format
	return nil
}

// checkLogging validates c as kube-proxy does (its feature gates at
// their defaults: the alpha options off), and refuses what the proxies
// cannot honour: --vmodule (their log lines are not filtered by source
// file). Verbosity is accepted: every line the proxies write is at
// kube-proxy's level 0, shown at any -v. The flush frequency is too: they
// do not buffer.
func checkLogging(c *logsapi.LoggingConfiguration) error {
	gates := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(gates); err != nil {
		return err
	}
	checked := *c
	if checked.Format == logFormatJSON {
		// kube-proxy's binary registers json, which the validation
		// here does not know; the proxies write it with log/slog.
		checked.Format = logFormatText
	}
	if errs := logsapi.Validate(&checked, gates, field.NewPath("logging")); len(errs) > 0 {
		return fmt.Errorf("logging (--config's logging, or --v, --vmodule, --logging-format, --log-*): %w", errs.ToAggregate())
	}
	if c.Format == logFormatJSON && len(c.VModule) > 0 {
		return errors.New("logging.vmodule (--vmodule): only supported for the text log format")
	}
	if len(c.VModule) > 0 {
		return errors.New("logging.vmodule (--vmodule): not supported by this proxy: its log lines are not filtered by source file")
	}
	return nil
}

// newLogger is the proxy's logger, writing format (text or json) to w.
func newLogger(format string, w io.Writer) *slog.Logger {
	if format == logFormatJSON {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}
