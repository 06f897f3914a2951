package main

// Every setting of lapse is declared once, as a row of the tables in
// settings.go: its name, which is at once the flag --NAME, the
// environment variable LAPSE_NAME and the key NAME of a config file; its
// kind, default and help; whether it is secret; and how a running lapse
// serve takes a new value, or that a change needs a restart. The flags, the
// layering of file, environment and command line, the reloads, and what
// lapse config shows are all made from those rows.

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/internal/httpcall"
)

// A setting is one value that configures lapse.
type setting struct {
	// Name is the flag's name: lower case words joined by "-". It is also
	// the key of the config file and, as envName makes it, the variable.
	Name string
	// Kind is how the value is written, which it is checked against.
	Kind kind
	// Default is the value when nothing sets it, written as on the command
	// line ("10s"); empty is the zero value of the kind.
	Default string
	// Doc is the flag's help.
	Doc string
	// Secret hides the whole value wherever lapse shows it (lapse config,
	// the logs of a reload); other values show with the passwords of their
	// URLs hidden.
	Secret bool
	// Argument marks what one run of a command acts on (lapse close
	// --order, --reason): it is taken from the command line only, never
	// from LAPSE_* or a config file, so that a variable left in the
	// environment cannot choose what a command changes. A list argument may
	// be given more than once (--order A-1 --order ).
	Argument bool
	// Range, when set, bounds the values of an int, float or duration
	// setting (setting_range.go).
	Range *valueRange
	// Check, when set, refuses the values of the setting that its kind
	// takes but lapse cannot use (a word not among the flag's, an address
	// that is no HOST:PORT, a DSN of no store), wherever they come from,
	// as Range does. Its error must not repeat the value, which lapse
	// shows as shown does.
	Check func(text string) error
	// Reload puts a new value into force in a running lapse serve; nil when
	// a change needs a restart. The value is written as the flag prints it
	// ("5s" for a duration) and has passed the checks of Kind and Range. An
	// error leaves the running value in place.
	Reload func(p *process, value string) error

	// field returns the option of o that holds the value: a *string for
	// the kinds written as text, else a *bool, *int, *float64 or
	// *time.Duration as Kind says.
	field func(o *options) any
}

// A kind is how a setting's value is written. Lists are comma-separated on
// the command line and in the environment; a config file may give them as
// YAML lists.
type kind string

const (
	kindString   kind = "string"
	kindBool     kind = "boolean"
	kindInt      kind = "int"
	kindFloat    kind = "float"
	kindDuration kind = "duration"        // 1m30s
	kindList     kind = "list"            // a,b,c
	kindPairs    kind = "NAME=VALUE list" // a=1,b=2
	kindSchedule kind = "schedule"        // waits (1m,5m,…) or exp:BASE,CAP,ATTEMPTS
	kindWaits    kind = "waits"           // 1s,2s,4s: a schedule of waits only
)

// list reports whether a value of kind k is a comma-separated list, which a
// config file may give as a YAML list.
func (k kind) list() bool {
	return k == kindList || k == kindPairs || k == kindSchedule || k == kindWaits
}

// check returns why text is not a value of kind k, beyond what its flag
// refuses: the flags of the kinds written as text take any text.
func (k kind) check(text string) error {
	var err error
	switch k {
	case kindInt:
		_, err = decimal(text)
	case kindPairs:
		_, err = parsePairs(text)
	case kindSchedule:
		_, err = lapse.ParseSchedule(text)
	case kindWaits:
		_, err = parseWaits(text)
	}
	var le *lapse.Error
	if errors.As(err, &le) {
		return errors.New(lapse.ErrorMessage(err)) // without its "lapse: "
	}
	return err
}

// define defines the flag of s on fs, holding its value in o. A setting
// whose field does not hold its kind, or whose default does not parse, is
// a mistake in the table: it panics.
func (s *setting) define(fs *flag.FlagSet, o *options) {
	bad := func(err error) {
		panic(fmt.Sprintf("setting %s: %v", s.Name, err))
	}
	if err := s.Kind.check(s.Default); s.Default != "" && err != nil {
		bad(fmt.Errorf("default %q: %v", s.Default, err))
	}
	if s.Check != nil {
		if err := s.Check(s.Default); err != nil {
			bad(fmt.Errorf("default %q: %v", s.Default, err))
		}
	}
	if s.Range != nil {
		if _, err := rangeNumber(s.Kind, "0"); err != nil {
			bad(err)
		}
		if err := s.Range.check(s.Kind, s.Name, cmp.Or(s.Default, "0")); err != nil {
			bad(fmt.Errorf("default: %v", err))
		}
	}
	usage := s.Doc
	if s.Range != nil {
		usage += " (" + s.Range.String() + ")"
	}
	switch p := s.field(o).(type) {
	case *string:
		if s.Kind != kindString && s.Kind != kindList && s.Kind != kindPairs && s.Kind != kindSchedule && s.Kind != kindWaits {
			bad(fmt.Errorf("a %s held in a string", s.Kind))
		}
		if s.Argument && s.Kind == kindList {
			if s.Default != "" {
				bad(fmt.Errorf("a list argument has no default"))
			}
			fs.Var((*repeatedList)(p), s.Name, usage)
			break
		}
		fs.StringVar(p, s.Name, s.Default, usage)
	case *bool:
		v, err := parseDefault(s, kindBool, strconv.ParseBool)
		if err != nil {
			bad(err)
		}
		fs.BoolVar(p, s.Name, v, usage)
	case *int:
		v, err := parseDefault(s, kindInt, strconv.Atoi)
		if err != nil {
			bad(err)
		}
		fs.IntVar(p, s.Name, v, usage)
	case *float64:
		v, err := parseDefault(s, kindFloat, func(t string) (float64, error) { return strconv.ParseFloat(t, 64) })
		if err != nil {
			bad(err)
		}
		fs.Float64Var(p, s.Name, v, usage)
	case *time.Duration:
		v, err := parseDefault(s, kindDuration, time.ParseDuration)
		if err != nil {
			bad(err)
		}
		fs.DurationVar(p, s.Name, v, usage)
	default:
		bad(fmt.Errorf("its field is a %T", p))
	}
}

// repeatedList is the flag of a list argument: each use adds to the list.
type repeatedList string

func (l *repeatedList) String() string { return string(*l) }

func (l *repeatedList) Set(v string) error {
	if *l != "" {
		v = string(*l) + "," + v
	}
	*l = repeatedList(v)
	return nil
}

// parseDefault parses the default of s, which must be of kind want; empty
// is the zero value.
func parseDefault[T any](s *setting, want kind, parse func(string) (T, error)) (T, error) {
	var zero T
	if s.Kind != want {
		return zero, fmt.Errorf("a %s held in a %T", s.Kind, zero)
	}
	if s.Default == "" {
		return zero, nil
	}
	v, err := parse(s.Default)
	if err != nil {
		return zero, fmt.Errorf("default %q: %v", s.Default, err)
	}
	return v, nil
}

// check returns why text is not a value of s, beyond what its flag
// refuses: its kind's checks, its range and its Check. The error of a
// secret's value does not say what in it is wrong, which would show it.
func (s *setting) check(text string) error {
	err := s.Kind.check(text)
	if err == nil {
		err = s.Range.check(s.Kind, s.Name, text)
	}
	if err == nil && s.Check != nil {
		err = s.Check(text)
	}
	if err != nil && s.Secret {
		return fmt.Errorf("not a %s (the value is secret, so it is not shown)", s.Kind)
	}
	return err
}

// set sets the flag of s on fs to text, unless s refuses it.
func (s *setting) set(fs *flag.FlagSet, text string) error {
	if err := s.check(text); err != nil {
		return err
	}
	if s.Kind == kindInt {
		text, _ = decimal(text) // checked: as the range check read it
	}
	return fs.Set(s.Name, text)
}

// decimal returns text, a whole number in decimal digits, as the flag of
// an int reads it. The flag reads 0x10, 0b11, 0o7 and 1_000 too, and 010
// as octal, 8; the range check reads decimal only, and a zero-padded
// amount (050000) is no octal number to whoever wrote it.
func decimal(text string) (string, error) {
	n, err := strconv.Atoi(text)
	if err != nil {
		return "", errors.New("want a whole number in decimal digits")
	}
	return strconv.Itoa(n), nil
}

// isInt tells whether f is the flag of an int.
func isInt(f *flag.Flag) bool {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	_, ok = g.Get().(int)
	return ok
}

// shown returns value as lapse shows it: a secret's as xxxxx, other values
// with the passwords of their URLs and DSNs hidden.
func (s *setting) shown(value string) string {
	if s.Secret && value != "" {
		return "xxxxx"
	}
	return hidePasswords(value)
}

var (
	// A password runs to the last @ before the host, as URLs are parsed:
	// it may hold an @ of its own. A user or password may hold blanks,
	// left as they are where they should be percent-encoded: the value is
	// refused then, and shown in the error; only a line ends them.
	urlPassword = regexp.MustCompile(`(://[^:/?#@\r\n]*):[^/\r\n]*@`)
	// A password with a / left as it is (as generated ones have), which
	// url.Parse refuses, and which the pattern above leaves whole: told from
	// a port and a path with an @ by what comes before its first /, which
	// a port has all digits.
	// Before its first / it holds no comma, which would be the end of a
	// URL of a list (nats://h1:4222,nats://TOKEN@h2).
	urlSlashPassword = regexp.MustCompile(`(://[^:/?#@\r\n]*):(?:[^/@,\r\n]*[^0-9/@,\s][^/@,\r\n]*)?/[^@\r\n]*@`)
	// A user without a password is the credential itself where NATS reads
	// it (nats://TOKEN@host is token auth) and where HTTP sends it (Basic
	// auth): a webhook's or a port's https://TOKEN@host. A database's user
	// is only a name.
	urlToken = regexp.MustCompile(`(?i)(\b(?:nats|tls|wss?|https?)://)[^:/?#@\r\n,]+@`)
	// A key=value DSN's password may be quoted, with blanks in it
	// (password='a b', \' and \\ escaped), and libpq lets blanks stand
	// around the =; a quote left open runs to the end.
	dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)(?:'(?:[^'\\]|\\.)*(?:'|\\?$)|[^&\s]*)`)
	// The Go MySQL driver's DSN, user:password@tcp(host:3306)/db, which
	// --db refuses (a mysql:// URL is its form) but shows in the error.
	driverPassword = regexp.MustCompile(`^([^:@/\s]*):[^\s]*@((tcp|unix)\()`)
	// The query of an http(s) URL (a webhook's, a port's, a provider's),
	// which often carries its token (?token=…), up to the next URL of a
	// list; and each of its values.
	httpQuery = regexp.MustCompile(`(?i)(https?://[^?\s,]*\?)([^\s,#]*)`)
	// The path of an http(s) URL, which may carry a token as a segment of
	// its own (Slack's and Discord's incoming webhooks): its long segments
	// are masked (httpcall.MaskPath).
	httpPath   = regexp.MustCompile(`(?i)(https?://[^/?#\s,]*)(/[^?#\s,]*)`)
	queryValue = regexp.MustCompile(`=[^&;]*`)
)

// hidePasswords returns value with the passwords of the URLs and DSNs in it
// replaced by xxxxx (postgres://u:xxxxx@db/lapse, …?password=xxxxx), the
// tokens that NATS and HTTP URLs carry as their user (nats://xxxxx@h), and
// the query values of its http(s) URLs too (https://h/hook?token=xxxxx): a
// value that is not a secret, as lapse shows it in its output and its logs.
func hidePasswords(value string) string {
	value = httpPath.ReplaceAllStringFunc(value, func(u string) string {
		m := httpPath.FindStringSubmatch(u)
		return m[1] + httpcall.MaskPath(m[2])
	})
	value = httpQuery.ReplaceAllStringFunc(value, func(u string) string {
		m := httpQuery.FindStringSubmatch(u)
		return m[1] + queryValue.ReplaceAllString(m[2], "=xxxxx")
	})
	value = urlSlashPassword.ReplaceAllString(value, "${1}:xxxxx@")
	value = urlPassword.ReplaceAllString(value, "${1}:xxxxx@")
	value = urlToken.ReplaceAllString(value, "${1}xxxxx@")
	value = driverPassword.ReplaceAllString(value, "${1}:xxxxx@${2}")
	return dsnPassword.ReplaceAllString(value, "${1}xxxxx")
}

// defineFlags defines the flags of settings on fs, holding their values in
// o.
func defineFlags(fs *flag.FlagSet, settings []*setting, o *options) {
	for _, s := range settings {
		s.define(fs, o)
	}
}

// settingsByName returns settings keyed by name.
func settingsByName(settings []*setting) map[string]*setting {
	out := make(map[string]*setting, len(settings))
	for _, s := range settings {
		out[s.Name] = s
	}
	return out
}

// envName is the environment variable of setting name: LAPSE_SWEEP_INTERVAL
// for sweep-interval.
func envName(name string) string {
	return "LAPSE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// splitList splits a list setting into its values, blanks trimmed and empty
// values left out.
func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// parsePairs parses a NAME=VALUE list setting, each NAME once: of a name
// given twice, one value would go unused, and nothing would say which.
// Its errors show an item as lapse shows values, without the password a
// URL in it may hold.
func parsePairs(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range splitList(s) {
		k, v, ok := strings.Cut(part, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%q is not NAME=VALUE", hidePasswords(part))
		}
		if _, ok := out[k]; ok {
			return nil, fmt.Errorf("%s: given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// parseWaits parses a waits setting: a schedule of waits such as 1s,2s,4s,
// which exp: schedules are not.
func parseWaits(s string) ([]time.Duration, error) {
	sch, err := lapse.ParseSchedule(s)
	if err == nil && len(sch.Steps) == 0 {
		err = fmt.Errorf("give the waits, such as 1s,2s,4s")
	}
	if err != nil {
		return nil, err
	}
	return sch.Steps, nil
}

// oneOf returns the Check of a setting that takes one of words.
func oneOf(words ...string) func(string) error {
	return func(text string) error {
		if !slices.Contains(words, text) {
			return fmt.Errorf("want %s", strings.Join(words, " or "))
		}
		return nil
	}
}

// optional returns check, for a setting whose empty value (off) is good
// too.
func optional(check func(string) error) func(string) error {
	return func(text string) error {
		if text == "" {
			return nil
		}
		return check(text)
	}
}

// checkURL is the Check of a URL setting, and checkURLs of a list of them
// (the NATS servers): each must parse as a URL. The error does not repeat
// it: url.Parse's would, password and all, and a password with a / left as
// it is (as generated ones have) is the usual cause.
func checkURL(text string) error {
	if u, err := url.Parse(text); err != nil || u.Scheme == "" {
		return errors.New("not a URL (SCHEME://HOST…; percent-encode / : @ ? # and % in its user or password)")
	}
	return nil
}

func checkURLs(text string) error {
	for part := range strings.SplitSeq(text, ",") {
		part = strings.TrimSpace(part)
		if !strings.Contains(part, "://") {
			part = "nats://" + part // as the NATS client takes HOST:PORT
		}
		if err := checkURL(part); err != nil {
			return err
		}
	}
	return nil
}

// checkAddr is the Check of a listener's address.
func checkAddr(text string) error {
	if _, _, err := net.SplitHostPort(text); err != nil {
		return errors.New("want HOST:PORT, such as 127.0.0.1:8080 (:8080 for every interface; port 0 picks a free one)")
	}
	return nil
}

// checkLogLevel is the Check of --log-level, which takes what newLogger
// takes.
func checkLogLevel(text string) error {
	var lv slog.Level
	if lv.UnmarshalText([]byte(text)) != nil {
		return errors.New("want debug, info, warn or error")
	}
	return nil
}

// checkTriggerMode is the Check of --trigger-mode.
func checkTriggerMode(text string) error {
	if _, err := engine.ParseTriggerMode(text); err != nil {
		return fmt.Errorf("want %s, %s or %s", engine.TriggerAuto, engine.TriggerShared, engine.TriggerDatabase)
	}
	return nil
}
