package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// newFlagSet returns a flag set for command name that writes its usage to w.
func newFlagSet(name string, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("lapse "+name, flag.ContinueOnError)
	fs.SetOutput(w)
	return fs
}

// parseArgs parses args into the flags of fs. Flags may come before, after
// or between the positional arguments (lapse flows auto_confirm --flows
// DIR), as every command of lapse takes them; "--" ends the flags. After
// it, fs.Args returns the positional arguments in their order. A flag
// given twice is refused, as a key given twice in a config file is:
// --hmac-secrets A --hmac-secrets B would keep B alone. A list argument
// (lapse close --order) adds up over its uses instead.
func parseArgs(fs *flag.FlagSet, args []string) error {
	var flags, positional []string
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			positional = append(positional, args[i+1:]...)
			i = len(args)
		case len(a) < 2 || a[0] != '-':
			positional = append(positional, a)
		default:
			name, value, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
			f := fs.Lookup(name)
			if f != nil {
				if _, adds := f.Value.(*repeatedList); !adds && seen[name] {
					return fmt.Errorf("flag -%s is given twice: give it once (a list takes its values comma-separated)", name)
				}
				seen[name] = true
			}
			if f != nil && isInt(f) && (inline || i+1 < len(args)) {
				// In decimal, as from a variable or a file (see decimal).
				if !inline {
					i++
					value = args[i]
				}
				n, err := decimal(value)
				if err != nil {
					return fmt.Errorf("invalid value %q for flag -%s: %v", value, name, err)
				}
				flags = append(flags, "-"+name+"="+n)
				continue
			}
			flags = append(flags, a)
			if !inline && i+1 < len(args) && takesValue(fs, name) {
				i++
				flags = append(flags, args[i])
			} else if !inline && i+1 < len(args) && fs.Lookup(name) != nil && isBoolWord(args[i+1]) {
				// --dry-run false would set --dry-run and make "false" an
				// argument: an order number to close, say.
				return fmt.Errorf("flag -%s takes no value after a space: write -%s=%s", name, name, args[i+1])
			}
		}
	}
	return fs.Parse(append(append(flags, "--"), positional...))
}

// isBoolWord tells whether a is true or false, in any case: a value meant
// for a boolean flag. (1 and 0, which the flag takes too, may be order
// numbers.)
func isBoolWord(a string) bool {
	return strings.EqualFold(a, "true") || strings.EqualFold(a, "false")
}

// takesValue tells whether flag name of fs reads the next argument as its
// value: every flag but a boolean one (--dry-run) does. An unknown flag
// takes none; fs.Parse refuses it.
func takesValue(fs *flag.FlagSet, name string) bool {
	f := fs.Lookup(name)
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// parseFlags defines the flags of settings on fs, holding their values in
// o, and parses args into them. A flag takes its value from the command
// line, else from the environment (flag "sweep-interval" from
// LAPSE_SWEEP_INTERVAL; an empty variable counts as unset), else from the
// config file named by --config or LAPSE_CONFIG, else from its default.
// An argument (setting.Argument: what one run acts on) comes from the
// command line or its default only, and a config file that names one is
// refused.
// When the config file is unusable and its last good snapshot is used
// instead, the warning goes to the output of fs; commands with a logger
// call loadFlags and log it.
func parseFlags(fs *flag.FlagSet, settings []*setting, o *options, args []string) error {
	cfg, err := loadFlags(fs, settings, o, args)
	if err != nil {
		return err
	}
	for _, w := range cfg.warnings() {
		fmt.Fprintln(fs.Output(), "lapse: warning:", w)
	}
	return nil
}

// newLogger returns the process logger, writing to w.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}
