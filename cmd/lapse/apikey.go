package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lapsehq/lapse/access"
)

const apikeyUsage = `Usage:
  lapse apikey create --name NAME --scopes SCOPES   make a key; it is printed once, on stdout
  lapse apikey list                                 every key, revoked ones too
  lapse apikey revoke PREFIX                        from now on the key is refused

Scopes: ` + "%s" + `.
Each takes --db DSN and --config FILE. The command acts with the database's own
credentials, as the admin "cli:<OS user>": whoever can reach the database is admin.
`

// apikey manages the API keys of the services that call Lapse.
func apikey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	help := func(w io.Writer) { fmt.Fprintf(w, apikeyUsage, strings.Join(access.AllScopes(), ", ")) }
	if len(args) == 0 {
		help(stderr)
		return errUsage
	}
	switch args[0] {
	case "create":
		return apikeyCreate(ctx, args[1:], stdout, stderr)
	case "list":
		return apikeyList(ctx, args[1:], stdout, stderr)
	case "revoke":
		return apikeyRevoke(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		help(stdout)
		return nil
	default:
		help(stderr)
		return fmt.Errorf("apikey: unknown command %q", args[0])
	}
}

// accessTool parses the flags of a command that acts on the access records
// and returns its options, with the access service over the database, and
// the positional arguments. A command that takes none (positional false)
// refuses one before the database is opened; one that takes some checks
// them itself. Call the returned close when done.
func accessTool(ctx context.Context, name string, settings []*setting, positional bool, args []string, stderr io.Writer) (*options, *access.Service, []string, func(), error) {
	fs := newFlagSet(name, stderr)
	o := &options{}
	if err := parseFlags(fs, settings, o, args); err != nil {
		return nil, nil, nil, nil, err
	}
	if !positional && fs.NArg() > 0 {
		return nil, nil, nil, nil, fmt.Errorf("%s: unexpected argument %q", name, fs.Arg(0))
	}
	store, err := openExisting(ctx, o.db)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	svc, err := access.New(store, access.Config{})
	if err != nil {
		store.Close()
		return nil, nil, nil, nil, err
	}
	return o, svc, fs.Args(), func() { store.Close() }, nil
}

func apikeyCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, svc, _, done, err := accessTool(ctx, "apikey create", apikeyCreateSettings, false, args, stderr)
	if err != nil {
		return err
	}
	defer done()
	if o.args.name == "" || o.args.scopes == "" {
		return fmt.Errorf("apikey create: give --name (what the key is for) and --scopes (%s)", strings.Join(access.AllScopes(), ", "))
	}
	key, k, err := svc.CreateKey(ctx, cliPrincipal(), o.args.name, splitList(o.args.scopes))
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, key)
	fmt.Fprintf(stderr, "API key %q made: prefix %s, scopes %s. It is shown this once; Lapse keeps only its hash.\n",
		k.Name, k.Prefix, strings.Join(k.Scopes, " "))
	return nil
}

func apikeyList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	_, svc, _, done, err := accessTool(ctx, "apikey list", dbSettings, false, args, stderr)
	if err != nil {
		return err
	}
	defer done()
	keys, err := svc.Keys(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PREFIX\tNAME\tSCOPES\tCREATED\tBY\tREVOKED")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.Prefix, quoteBlank(k.Name), strings.Join(k.Scopes, ","),
			when(k.CreatedAt), k.CreatedBy, when(k.RevokedAt))
	}
	return tw.Flush()
}

func apikeyRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	_, svc, rest, done, err := accessTool(ctx, "apikey revoke", dbSettings, true, args, stderr)
	if err != nil {
		return err
	}
	defer done()
	if len(rest) != 1 {
		return fmt.Errorf("apikey revoke: give the prefix of one key (lapse apikey list shows them)")
	}
	k, changed, err := svc.RevokeKey(ctx, cliPrincipal(), rest[0])
	if err != nil {
		return err
	}
	if !changed {
		fmt.Fprintf(stdout, "API key %s (%q) is revoked already, since %s; nothing changed\n", k.Prefix, k.Name, when(k.RevokedAt))
		return nil
	}
	fmt.Fprintf(stdout, "API key %s (%q) revoked at %s\n", k.Prefix, k.Name, when(k.RevokedAt))
	return nil
}

// when shows a time of the access records, in UTC to the second; "-" when
// it is zero (never).
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
