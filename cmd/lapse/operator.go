package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/lapsehq/lapse/access"
)

const operatorUsage = `Usage:
  lapse operator add --name NAME --role viewer|operator|admin
        add a person who logs in to the console or the API. The password is the
        first line of stdin (printf '%s\n' "$PW" | lapse operator add …); with
        nothing on stdin, or a terminal, one is generated and printed. Prints the
        TOTP enrolment: the otpauth URI and its QR code, for an authenticator app.
  lapse operator list              every operator, disabled ones too
  lapse operator disable NAME      no more logins; their sessions end, their pending approval
                                   requests are cancelled
  lapse operator enable NAME       they may log in again: clears the disable and a lockout
  lapse operator role NAME ROLE    viewer|operator|admin; their sessions end
  lapse operator reset NAME        a new password (from stdin, or generated, as add) and a new
                                   TOTP enrolment, printed as add prints them; clears a
                                   lockout; their sessions end, their pending approval requests
                                   are cancelled. A disabled operator stays so.
  lapse operator logout NAME       log them out everywhere: every session of theirs ends; they
                                   may log in again

Each takes --db DSN and --config FILE. The command acts with the database's own
credentials, as the admin "cli:<OS user>": whoever can reach the database is admin.
`

// operator manages the people who log in.
func operator(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		io.WriteString(stderr, operatorUsage)
		return errUsage
	}
	switch args[0] {
	case "add":
		return operatorAdd(ctx, args[1:], stdin, stdout, stderr)
	case "list":
		return operatorList(ctx, args[1:], stdout, stderr)
	case "disable":
		return operatorDisable(ctx, args[1:], stdout, stderr)
	case "enable":
		return operatorEnable(ctx, args[1:], stdout, stderr)
	case "role":
		return operatorRole(ctx, args[1:], stdout, stderr)
	case "reset":
		return operatorReset(ctx, args[1:], stdin, stdout, stderr)
	case "logout":
		return operatorLogout(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		io.WriteString(stdout, operatorUsage)
		return nil
	default:
		io.WriteString(stderr, operatorUsage)
		return fmt.Errorf("operator: unknown command %q", args[0])
	}
}

func operatorAdd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	o, svc, _, done, err := accessTool(ctx, "operator add", operatorAddSettings, false, args, stderr)
	if err != nil {
		return err
	}
	defer done()
	if o.args.name == "" || o.args.role == "" {
		return fmt.Errorf("operator add: give --name and --role (%s, %s or %s)", access.RoleViewer, access.RoleOperator, access.RoleAdmin)
	}
	password, err := readPassword(ctx, "operator add", stdin)
	if err != nil {
		return err
	}
	op, enr, err := svc.AddOperator(ctx, cliPrincipal(), o.args.name, o.args.role, password)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "operator %q added, role %s\n", op.Name, op.Role)
	printEnrolment(stdout, enr)
	return nil
}

// printEnrolment prints what an operator is given once: the password when
// it was generated, and the TOTP secret, its otpauth URI and QR code.
func printEnrolment(stdout io.Writer, enr *access.Enrolment) {
	if enr.Password != "" {
		fmt.Fprintf(stdout, "password (generated; shown this once): %s\n", enr.Password)
	}
	fmt.Fprintf(stdout, "TOTP secret: %s\notpauth URI: %s\n\n%s\n", enr.Secret, enr.URI, enr.QR)
	fmt.Fprintln(stdout, "Scan the code, or enter the secret, in an authenticator app: logins and risky actions ask for its codes.")
}

// readPassword reads the first line of stdin, without its line ending, for
// the command cmd. Nothing on stdin, or a terminal (whose typing would
// show on the screen), is an empty password: AddOperator and
// ResetOperator then generate one. A read still waiting when ctx ends (a
// pipe whose writer neither writes nor closes it, and Ctrl-C) gives up
// with ctx's error: the read itself cannot be cut short, and is left to
// the process's end.
func readPassword(ctx context.Context, cmd string, stdin io.Reader) (string, error) {
	if stdin == nil {
		return "", nil
	}
	if f, ok := stdin.(*os.File); ok {
		if info, err := f.Stat(); err == nil && info.Mode()&os.ModeCharDevice != 0 {
			return "", nil
		}
	}
	type read struct {
		line string
		err  error
	}
	got := make(chan read, 1)
	go func() {
		line, err := bufio.NewReader(io.LimitReader(stdin, 4*access.MaxPasswordLen+2)).ReadString('\n')
		got <- read{line, err}
	}()
	var r read
	select {
	case r = <-got:
	case <-ctx.Done():
		return "", fmt.Errorf("%s: reading the password from stdin: %w", cmd, context.Cause(ctx))
	}
	if r.err != nil && r.err != io.EOF {
		return "", fmt.Errorf("%s: reading the password from stdin: %w", cmd, r.err)
	}
	return strings.TrimSuffix(strings.TrimSuffix(r.line, "\n"), "\r"), nil
}

func operatorList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	_, svc, _, done, err := accessTool(ctx, "operator list", dbSettings, false, args, stderr)
	if err != nil {
		return err
	}
	defer done()
	ops, err := svc.Operators(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tCREATED\tDISABLED\tLOCKED UNTIL")
	for _, op := range ops {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", quoteBlank(op.Name), op.Role, when(op.CreatedAt), when(op.DisabledAt), when(op.LockedUntil))
	}
	return tw.Flush()
}

func operatorDisable(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	_, svc, rest, done, err := accessTool(ctx, "operator disable", dbSettings, true, args, stderr)
	if err != nil {
		return err
	}
	defer done()
	if len(rest) != 1 {
		return fmt.Errorf("operator disable: give the name of one operator")
	}
	op, changed, err := svc.DisableOperator(ctx, cliPrincipal(), rest[0])
	if err != nil {
		return err
	}
	if !changed {
		fmt.Fprintf(stdout, "operator %q is disabled already, since %s; nothing changed\n", op.Name, when(op.DisabledAt))
		return nil
	}
	fmt.Fprintf(stdout, "operator %q disabled at %s; their sessions are ended and their pending approval requests cancelled\n", op.Name, when(op.DisabledAt))
	return nil
}

func operatorEnable(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	_, svc, rest, done, err := accessTool(ctx, "operator enable", dbSettings, true, args, stderr)
	if err != nil {
		return err
	}
	defer done()
	if len(rest) != 1 {
		return fmt.Errorf("operator enable: give the name of one operator")
	}
	op, changed, err := svc.EnableOperator(ctx, cliPrincipal(), rest[0])
	if err != nil {
		return err
	}
	if !changed {
		fmt.Fprintf(stdout, "operator %q is enabled and not locked out already; nothing changed\n", op.Name)
		return nil
	}
	fmt.Fprintf(stdout, "operator %q enabled, with no lockout and no failed logins counted: they may log in\n", op.Name)
	return nil
}

func operatorRole(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	_, svc, rest, done, err := accessTool(ctx, "operator role", dbSettings, true, args, stderr)
	if err != nil {
		return err
	}
	defer done()
	if len(rest) != 2 {
		return fmt.Errorf("operator role: give the name of one operator and a role (%s, %s or %s)", access.RoleViewer, access.RoleOperator, access.RoleAdmin)
	}
	op, changed, err := svc.SetOperatorRole(ctx, cliPrincipal(), rest[0], rest[1])
	if err != nil {
		return err
	}
	if !changed {
		fmt.Fprintf(stdout, "operator %q has the role %s already; nothing changed\n", op.Name, op.Role)
		return nil
	}
	fmt.Fprintf(stdout, "operator %q has the role %s; their sessions are ended\n", op.Name, op.Role)
	return nil
}

func operatorReset(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	_, svc, rest, done, err := accessTool(ctx, "operator reset", dbSettings, true, args, stderr)
	if err != nil {
		return err
	}
	defer done()
	if len(rest) != 1 {
		return fmt.Errorf("operator reset: give the name of one operator")
	}
	password, err := readPassword(ctx, "operator reset", stdin)
	if err != nil {
		return err
	}
	op, enr, err := svc.ResetOperator(ctx, cliPrincipal(), rest[0], password)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "operator %q reset: a new password and TOTP secret, no lockout; their sessions are ended and their pending approval requests cancelled\n", op.Name)
	if !op.DisabledAt.IsZero() {
		fmt.Fprintf(stdout, "operator %q is still disabled: lapse operator enable lets them log in\n", op.Name)
	}
	printEnrolment(stdout, enr)
	return nil
}

func operatorLogout(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	_, svc, rest, done, err := accessTool(ctx, "operator logout", dbSettings, true, args, stderr)
	if err != nil {
		return err
	}
	defer done()
	if len(rest) != 1 {
		return fmt.Errorf("operator logout: give the name of one operator")
	}
	op, err := svc.EndOperatorSessions(ctx, cliPrincipal(), rest[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "operator %q logged out everywhere: every session of theirs is ended\n", op.Name)
	return nil
}
