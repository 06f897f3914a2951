package main

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/engine"
	lapsehttp "github.com/lapsehq/lapse/http"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/webhook"
)

// options holds the values of the settings, where the commands read them.
type options struct {
	config                                  string
	db, addr, logLevel, logFormat, flowsDir string
	dbConns, workConns, inFlight, reserve   int
	maxConns                                int
	bodyTimeout, batchGather                time.Duration
	auditSealInterval                       time.Duration
	probeInterval                           time.Duration
	outboxRetention, outboxPruneInterval    time.Duration
	heldPaymentWindow                       time.Duration
	deadlines                               bool
	cc                                      engine.ClaimerConfig
	dc                                      engine.DelivererConfig
	sf                                      subscriberFlags
	pf                                      paymentFlags
	tf                                      triggerFlags
	ac                                      accessFlags
	args                                    toolArgs
	bench                                   benchArgs
	demo                                    demoArgs
}

// toolArgs are the arguments of the commands that act on the database
// (setting.Argument): what one run acts on.
type toolArgs struct {
	name, scopes, role           string
	limit                        int
	target, actor, checkpoint    string
	orders, user, from, to, flow string
	dryRun                       bool
	reason                       string
}

// configSetting names the config file. Every command has it; it cannot be
// set in the file itself.
var configSetting = &setting{Name: "config", Kind: kindString,
	Doc:   "YAML file of flag values, keyed by flag name (sweep-interval: 5s); LAPSE_* variables and flags override it",
	field: func(o *options) any { return &o.config }}

// Settings that several commands share.
var (
	dbSetting = &setting{Name: "db", Kind: kindString, Default: defaultDB, Check: checkDSN,
		Doc:   "database: an SQLite file path, a postgres:// URL or a mysql://user:password@host:3306/database URL",
		field: func(o *options) any { return &o.db }}
	flowsSetting = &setting{Name: "flows", Kind: kindString,
		Doc:   "a directory of YAML flows to run beside the built-in ones",
		field: func(o *options) any { return &o.flowsDir }}
)

// serveSettings are the settings of lapse serve, which lapse config shows.
// A new setting of serve goes here, with a field of options to hold it; a
// setting that a running serve can take without a restart has a Reload
// (see reload.go), and the README lists it.
var serveSettings = []*setting{
	// The API and the database.
	dbSetting,
	{Name: "http", Kind: kindString, Default: "127.0.0.1:8080", Check: checkAddr,
		Doc:   "address of the HTTP API (port 0 picks a free one)",
		field: func(o *options) any { return &o.addr }},
	{Name: "db-conns", Kind: kindInt, Range: between("0", "10000"),
		Doc:   "PostgreSQL, MySQL: connections for the API (0: the DSN's pool_max_conns on PostgreSQL, or 16)",
		field: func(o *options) any { return &o.dbConns }},
	{Name: "db-work-conns", Kind: kindInt, Range: between("1", "10000"), Default: "8",
		Doc:   "PostgreSQL, MySQL: connections of their own for the deadline engine and the delivery workers, so that API load cannot starve them",
		field: func(o *options) any { return &o.workConns }},
	{Name: "batch-gather", Kind: kindDuration, Range: between("0s", "100ms"), Default: postgres.DefaultBatchGather.String(),
		Doc:   "PostgreSQL: how long a batch of the API's order and key reads, creations and payment callbacks waits for more when it holds fewer than four and requests come at least two in this time, so that at thousands of requests a second they share statements and commits; it adds up to this much latency. Quieter or busier, nothing waits (0: off)",
		field: func(o *options) any { return &o.batchGather }},
	{Name: "max-in-flight", Kind: kindInt, Range: between("0", "1000000"), Default: strconv.Itoa(4 * int(postgres.DefaultMaxConns)),
		Doc:   "API requests in flight beyond which a request is answered 429 with Retry-After (0: no limit); a request counts once its body is in",
		field: func(o *options) any { return &o.inFlight }},
	{Name: "max-conns", Kind: kindInt, Range: between("0", "1000000"), Default: strconv.Itoa(defaultMaxConns),
		Doc:   "open connections that the API's listener (--http), and the console's (--console-http) each, accepts at most; past it a new connection waits in the kernel's backlog until one closes, rather than take a goroutine, buffers and a file descriptor (0: no limit)",
		field: func(o *options) any { return &o.maxConns }},
	{Name: "callback-reserve", Kind: kindInt, Range: between("0", "1000000"),
		Doc:   "in-flight slots that only payment callbacks may take: other API requests are shed at --max-in-flight minus this (0: a quarter of --max-in-flight)",
		field: func(o *options) any { return &o.reserve }},
	{Name: "body-timeout", Kind: kindDuration, Range: positive, Default: lapsehttp.DefaultBodyTimeout.String(),
		Doc:   "longest a request body may take to arrive after its headers; a slower one is refused with 400 and its connection closed",
		field: func(o *options) any { return &o.bodyTimeout }},
	{Name: "log-level", Kind: kindString, Default: "info", Check: checkLogLevel,
		Doc:   "debug, info, warn or error",
		field: func(o *options) any { return &o.logLevel }},
	{Name: "log-format", Kind: kindString, Default: "text", Check: oneOf("text", "json"),
		Doc:   "text or json",
		field: func(o *options) any { return &o.logFormat }},
	flowsSetting,

	// Who may call.
	{Name: "admin-key", Kind: kindString, Secret: true,
		Doc:   "an API key with the admin scope, at least 32 characters of printable ASCII without blanks (openssl rand -base64 32); without it, the first start makes one and writes it to --admin-key-file",
		field: func(o *options) any { return &o.ac.adminKey }},
	{Name: "admin-key-file", Kind: kindString,
		Doc:   "where the first start without --admin-key writes the admin key it makes, mode 0600 (default: beside an SQLite database, lapse.db.admin-key for lapse.db; lapse.admin-key in the working directory for PostgreSQL and MySQL)",
		field: func(o *options) any { return &o.ac.adminKeyFile }},
	{Name: "approval-amount", Kind: kindInt, Range: atLeast("0"), Default: "50000",
		Doc:   "four eyes: an operator's refund or retry of more than this much money (minor units) waits for a second operator's approval (0: never)",
		field: func(o *options) any { return &o.ac.approvalAmount }},
	{Name: "approval-count", Kind: kindInt, Range: atLeast("0"), Default: "100",
		Doc:   "four eyes: an operator's manual close, cancel of an open group buy, event that ends an order (a CANCEL), or deadline brought earlier, that would take the orders they put at stake on their own word in the last 24 hours (closed or cancelled orders, cancelled members, orders or open groups' members whose deadlines they brought earlier) past this many waits for a second operator's approval (0: never)",
		field: func(o *options) any { return &o.ac.approvalCount }},
	{Name: "approval-ttl", Kind: kindDuration, Range: positive, Default: access.DefaultApprovalTTL.String(),
		Doc:   "how long a request waits for a second operator's approval before it expires",
		field: func(o *options) any { return &o.ac.approvalTTL }},
	{Name: "second-factor-window", Kind: kindDuration, Range: positive, Default: access.DefaultSecondFactorWindow.String(),
		Doc:   "how recent an operator's TOTP code must be for a risky action without a new one",
		field: func(o *options) any { return &o.ac.secondFactorWindow }},
	{Name: "session-ttl", Kind: kindDuration, Range: positive, Default: access.DefaultSessionTTL.String(),
		Doc:   "how long an operator's login lasts at most, however busy its session",
		field: func(o *options) any { return &o.ac.sessionTTL }},
	{Name: "session-idle", Kind: kindDuration, Range: positive, Default: access.DefaultSessionIdle.String(),
		Doc:   "how long an operator's session lasts without a request (the console or the API); each request moves its end this much later, never past --session-ttl from the login; one as long as --session-ttl or longer leaves only that",
		field: func(o *options) any { return &o.ac.sessionIdle }},
	{Name: "logins-per-minute", Kind: kindInt, Range: between("1", "10000"), Default: strconv.Itoa(access.DefaultLoginsPerMinute),
		Doc:   "how many logins one client address (an IPv6 /64) may try at once and then in a minute, whatever the names; past it a login is answered 429 with Retry-After without a look at its password; a good login does not count. Behind a proxy, name it in --trusted-proxies, or every client has the proxy's address",
		field: func(o *options) any { return &o.ac.loginsPerMinute }},
	{Name: "metrics-http", Kind: kindString, Check: optional(checkAddr),
		Doc:   "address of a listener of its own that serves /metrics without a credential (keep it private); the API's /metrics needs the metrics:read scope either way",
		field: func(o *options) any { return &o.ac.metricsAddr }},
	{Name: "console-http", Kind: kindString, Check: optional(checkAddr),
		Doc:   "address of a listener of its own for the operators' console (it is served under /console/ on --http too)",
		field: func(o *options) any { return &o.ac.consoleAddr }},
	{Name: "audit-seal-interval", Kind: kindDuration, Range: positive, Default: engine.DefaultAuditSealInterval.String(),
		Doc:   "how soon the audit log's sealer seals the rows this process's API commits: audited writes append their rows unsealed, so that they do not wait for one another, and the sealer numbers and hash-chains them behind; an edit of a row is found only once it is sealed. Other rows (logins, keys, the command line's) are sealed within 5s. Every serve runs a sealer; they take turns",
		field: func(o *options) any { return &o.auditSealInterval }},
	{Name: "outbox-retention", Kind: kindDuration, Range: atLeast("0s"), Default: engine.DefaultOutboxRetention.String(),
		Doc:   "how long an event stays in the outbox, with its deliveries and their attempts, once every delivery of it is done; then it is deleted. Events with a delivery pending or dead, and every event of an order that went to review, stay however old; the transition log is never deleted (0: keep every event)",
		field: func(o *options) any { return &o.outboxRetention }},
	{Name: "outbox-prune-interval", Kind: kindDuration, Range: atLeast("1s"), Default: engine.DefaultOutboxPruneInterval.String(),
		Doc:   "the pause between two passes of the outbox's pruner over the whole outbox; a pass rests between its steps as long as each took",
		field: func(o *options) any { return &o.outboxPruneInterval }},
	{Name: "held-payment-window", Kind: kindDuration, Range: between("1m", "8784h"), Default: engine.DefaultHeldWindow.String(),
		Doc:   "how long a payment whose verified callback named an order Lapse does not have is held for that order (its callback may have overtaken the order's creation; once the order exists it is applied as its callback would have been) before it goes to the operators' desk, to be refunded or dismissed",
		field: func(o *options) any { return &o.heldPaymentWindow }},
	{Name: "trusted-proxies", Kind: kindList,
		Doc:   "comma-separated addresses or networks (10.0.0.0/8, ::1) of the reverse proxies in front of Lapse, whose X-Forwarded-For names the client: the login limit and the audit log then key on the client's address rather than the proxy's. Without it the connection's peer is the client and X-Forwarded-For is never believed",
		field: func(o *options) any { return &o.ac.trustedProxies }},
	{Name: "trusted-origins", Kind: kindList,
		Doc:   "comma-separated origins (https://console.example) besides the API's own whose browsers may send requests with an operator's session cookie",
		field: func(o *options) any { return &o.ac.trustedOrigins }},

	// The deadline engine.
	{Name: "deadlines", Kind: kindBool, Default: "true",
		Doc:   "run the deadline engine (the claimer and its sweep) in this process; false makes an API-only node, which fires no deadlines: other processes on the database must",
		field: func(o *options) any { return &o.deadlines }},
	{Name: "probe-interval", Kind: kindDuration, Range: atLeast("1s").orOff("0s"), Default: engine.DefaultProbeInterval.String(),
		Doc:    "every this long, a synthetic probe order (" + lapse.ProbeOrderPrefix + "…, SKU " + engine.DefaultProbeSKU + ") walks create, deadline, close, stock release and delivery, each step bounded within the interval; its lapse_probe_* metrics and GET /v1/probe say how it went, and a failure is logged and told to --admin-notify. One process of those on a database runs each interval's probe",
		field:  func(o *options) any { return &o.probeInterval },
		Reload: reloadProbeInterval},
	{Name: "batch", Kind: kindInt, Range: between("1", "10000"), Default: "500",
		Doc:    "due orders claimed per transaction",
		field:  func(o *options) any { return &o.cc.Batch },
		Reload: reloadClaimerCount(func(c *engine.ClaimerConfig) *int { return &c.Batch })},
	{Name: "workers", Kind: kindInt, Range: between("1", "64"), Default: "2",
		Doc:    "transactions that burn down a backlog in parallel",
		field:  func(o *options) any { return &o.cc.Workers },
		Reload: reloadClaimerCount(func(c *engine.ClaimerConfig) *int { return &c.Workers })},
	{Name: "max-sleep", Kind: kindDuration, Range: positive, Default: "1s",
		Doc:    "longest the deadline engine sleeps without asking the database for the next deadline",
		field:  func(o *options) any { return &o.cc.MaxSleep },
		Reload: reloadClaimerDuration(func(c *engine.ClaimerConfig) *time.Duration { return &c.MaxSleep })},
	{Name: "claim-gather", Kind: kindDuration, Range: between("0s", "1s"), Default: "5ms",
		Doc:    "least time from the start of one claim of the deadline engine's precise path that fired orders to the start of the next, so that deadlines coming due close together close in one transaction: it adds up to this much close lag, and at 2,000 deadlines a second halves the CPU a close takes (0: off)",
		field:  func(o *options) any { return &o.cc.Gather },
		Reload: reloadClaimGather},
	{Name: "sweep-interval", Kind: kindDuration, Range: positive, Default: "10s",
		Doc:    "beat of the safety-net sweep",
		field:  func(o *options) any { return &o.cc.SweepInterval },
		Reload: reloadClaimerDuration(func(c *engine.ClaimerConfig) *time.Duration { return &c.SweepInterval })},
	{Name: "sweep-grace", Kind: kindDuration, Range: positive, Default: "1s",
		Doc:    "how overdue an order must be before the sweep fires it",
		field:  func(o *options) any { return &o.cc.SweepGrace },
		Reload: reloadClaimerDuration(func(c *engine.ClaimerConfig) *time.Duration { return &c.SweepGrace })},
	{Name: "sweep-batch", Kind: kindInt, Range: between("1", "10000"), Default: "500",
		Doc:    "due orders the sweep claims per transaction",
		field:  func(o *options) any { return &o.cc.SweepBatch },
		Reload: reloadClaimerCount(func(c *engine.ClaimerConfig) *int { return &c.SweepBatch })},
	{Name: "stop-timeout", Kind: kindDuration, Range: positive, Default: "10s",
		Doc:   "how long shutdown lets in-flight work finish",
		field: func(o *options) any { return &o.cc.StopTimeout }},

	// The shared precise trigger.
	{Name: "redis", Kind: kindString, Check: optional(checkURL),
		Doc:   "Redis URL (redis://host:6379/0), or Redis Sentinel (redis://sentinel1:26379/0?master_name=NAME&addr=sentinel2:26379&addr=…): a precise trigger shared by every lapse process, with the database as the truth and the sweep as the safety net",
		field: func(o *options) any { return &o.tf.redisURL }},
	{Name: "redis-prefix", Kind: kindString, Default: "lapse:",
		Doc:   "prefix of Lapse's keys in Redis",
		field: func(o *options) any { return &o.tf.prefix }},
	{Name: "redis-timeout", Kind: kindDuration, Range: positive, Default: "200ms",
		Doc:   "bound of one Redis command; a slower Redis counts as failed and degrades the trigger",
		field: func(o *options) any { return &o.tf.timeout }},
	{Name: "trigger-mode", Kind: kindString, Default: string(engine.TriggerAuto), Check: checkTriggerMode,
		Doc:    "auto: Redis while it answers, the database sweep on its faster beat while it does not; redis or database: forced",
		field:  func(o *options) any { return &o.tf.mode },
		Reload: reloadTriggerMode},
	{Name: "degraded-sweep", Kind: kindDuration, Range: positive, Default: "1s",
		Doc:    "beat of the sweep while Redis is configured but not in charge",
		field:  func(o *options) any { return &o.cc.DegradedSweep },
		Reload: reloadClaimerDuration(func(c *engine.ClaimerConfig) *time.Duration { return &c.DegradedSweep })},

	// Deliveries: the built-in ledgers, sinks and ports, and their schedules.
	{Name: "delivery-poll", Kind: kindDuration, Range: positive, Default: "1s",
		Doc:   "longest a subscriber's delivery loop sleeps before looking for due retries",
		field: func(o *options) any { return &o.dc.Poll }},
	{Name: "delivery-close-hold", Kind: kindDuration, Range: atLeast("0s"), Default: "1m0s",
		Doc:   "longest the webhook, NATS and RabbitMQ deliveries wait while this process's deadline engine burns down a backlog of due orders, from the start of the burn, so that the orders close first and their events follow (0: never)",
		field: func(o *options) any { return &o.dc.CloseHold }},
	{Name: "stock-ledger", Kind: kindBool, Default: "true",
		Doc:   "built-in stock ledger: checkout orders reserve their items at creation, closing releases them, paying consumes them; false: new orders reserve nothing, but stock that orders reserved while it was on is still released or consumed as they end",
		field: func(o *options) any { return &o.sf.stockLedger }},
	{Name: "coupon-ledger", Kind: kindBool, Default: "true",
		Doc:   "built-in coupon ledger: checkout orders lock their coupon at creation, closing unlocks it, paying uses it; false: new orders lock none, but coupons that orders locked while it was on are still unlocked or used as they end",
		field: func(o *options) any { return &o.sf.couponLedger }},

	{Name: webhookSub.Name, Kind: kindString, Check: optional(checkURL),
		Doc:   "URL of signed webhooks (see package webhook for the Lapse-Signature header): receives the event types of --webhook-events",
		field: func(o *options) any { return &o.sf.webhookURL }},
	{Name: "webhook-secret", Kind: kindString, Secret: true,
		Doc:   "HMAC secret of the signatures of " + andList(flagNames(signedWebhooks)) + ", at least " + strconv.Itoa(webhook.MinSecretLen) + " bytes",
		field: func(o *options) any { return &o.sf.webhookSecret }},
	{Name: "webhook-events", Kind: kindList, Default: eventList(webhookSub.Events),
		Doc:   "event types the webhook receives (comma separated; order.* is a prefix)",
		field: func(o *options) any { return &o.sf.webhookEvents }},
	{Name: "webhook-retry", Kind: kindSchedule, Default: "1m,5m,15m,30m,1h",
		Doc:    "retry schedule of " + andList(flagNames(signedWebhooks)) + ": waits (1m,5m,…) or exp:BASE,CAP,ATTEMPTS",
		field:  func(o *options) any { return &o.sf.webhookRetry },
		Reload: reloadSchedule(names(signedWebhooks)...)},

	{Name: natsSub.Name, Kind: kindString, Check: optional(checkURLs),
		Doc:   "NATS URL (JetStream): publishes with message id = event id; receives the event types of --nats-events",
		field: func(o *options) any { return &o.sf.natsURL }},
	{Name: "nats-stream", Kind: kindString, Default: "LAPSE",
		Doc:   "JetStream stream, created or updated at start",
		field: func(o *options) any { return &o.sf.natsStream }},
	{Name: "nats-subject", Kind: kindString, Default: "lapse",
		Doc:   "subject prefix: events go to <prefix>.<event type>",
		field: func(o *options) any { return &o.sf.natsSubject }},
	{Name: "nats-events", Kind: kindList, Default: eventList(natsSub.Events),
		Doc:   "event types published to NATS",
		field: func(o *options) any { return &o.sf.natsEvents }},
	{Name: "nats-retry", Kind: kindSchedule, Default: "exp:1s,1m,30",
		Doc:    "retry schedule of NATS publishes",
		field:  func(o *options) any { return &o.sf.natsRetry },
		Reload: reloadNATSSchedule},
	{Name: "nats-relay", Kind: kindBool,
		Doc:   "relay NATS publishes on PostgreSQL: events get no delivery row unless a publish fails; a relay reads them from the outbox in commit order (ignored on SQLite and MySQL)",
		field: func(o *options) any { return &o.sf.natsRelay }},

	{Name: rabbitmqSub.Name, Kind: kindString, Check: optional(checkURL),
		Doc:   "RabbitMQ URL: publishes with confirms to a quorum queue, message id = event id; receives the event types of --rabbitmq-events",
		field: func(o *options) any { return &o.sf.rabbitURL }},
	{Name: "rabbitmq-exchange", Kind: kindString, Default: "lapse",
		Doc:   "topic exchange, routing key = event type",
		field: func(o *options) any { return &o.sf.rabbitExchange }},
	{Name: "rabbitmq-queue", Kind: kindString, Default: "lapse.events",
		Doc:   "quorum queue bound to the exchange with #",
		field: func(o *options) any { return &o.sf.rabbitQueue }},
	{Name: "rabbitmq-events", Kind: kindList, Default: eventList(rabbitmqSub.Events),
		Doc:   "event types published to RabbitMQ",
		field: func(o *options) any { return &o.sf.rabbitEvents }},
	{Name: "rabbitmq-retry", Kind: kindSchedule, Default: "exp:1s,1m,30",
		Doc:    "retry schedule of RabbitMQ publishes",
		field:  func(o *options) any { return &o.sf.rabbitRetry },
		Reload: reloadSchedule(rabbitmqSub.Name)},

	{Name: stockPortSub.Name, Kind: kindString, Check: optional(checkURL),
		Doc:   "URL of a merchant stock service (port protocol, see package port): " + stockPortSub.receives(),
		field: func(o *options) any { return &o.sf.stockPort }},
	{Name: couponPortSub.Name, Kind: kindString, Check: optional(checkURL),
		Doc:   "URL of a merchant coupon service: " + couponPortSub.receives(),
		field: func(o *options) any { return &o.sf.couponPort }},
	{Name: notifyPortSub.Name, Kind: kindString, Check: optional(checkURL),
		Doc:   "URL of a merchant notification service: " + notifyPortSub.receives(),
		field: func(o *options) any { return &o.sf.notifyPort }},
	{Name: "port-retry", Kind: kindSchedule, Default: "1m,5m,15m,30m,1h",
		Doc:    "retry schedule of " + andList(flagNames(retriedPorts)),
		field:  func(o *options) any { return &o.sf.portRetry },
		Reload: reloadSchedule(names(retriedPorts)...)},
	{Name: "port-connect-timeout", Kind: kindDuration, Range: positive, Default: "2s",
		Doc:    "connect timeout of the ports and the signed webhooks",
		field:  func(o *options) any { return &o.sf.portConnect },
		Reload: reloadTimeout(true)},
	{Name: "port-read-timeout", Kind: kindDuration, Range: positive, Default: "10s",
		Doc:    "read timeout of the ports and the signed webhooks (from sending to the whole answer)",
		field:  func(o *options) any { return &o.sf.portRead },
		Reload: reloadTimeout(false)},
	{Name: "port-concurrency", Kind: kindInt, Range: between("1", "10000"), Default: "16",
		Doc:   "calls in flight per port and per signed webhook (bulkhead)",
		field: func(o *options) any { return &o.sf.portConcurrency }},

	// Group buys and memberships.
	{Name: groupNotifySub.Name, Kind: kindString, Check: optional(checkURL),
		Doc:   "URL told (signed webhook) of every group buy that failed or was abandoned, with its organiser, so that the organiser hears of it: " + groupNotifySub.receives(),
		field: func(o *options) any { return &o.sf.groupNotify }},
	{Name: adminNotifySub.Name, Kind: kindString, Check: optional(checkURL),
		Doc:   "URL of the admins' channel (signed webhook; the probe posts a failed run to it straight, as " + probeFailedEvent + "): " + adminNotifySub.receives(),
		field: func(o *options) any { return &o.sf.adminNotify }},
	{Name: cardPort, Kind: kindString, Check: optional(checkURL),
		Doc:   "URL of a merchant card service that issues and revokes membership cards (POST <URL>/issue, <URL>/revoke; see package port); default: the built-in card ledger",
		field: func(o *options) any { return &o.sf.cardPort }},
	{Name: "group-retries", Kind: kindWaits, Default: "1s,2s,4s,8s,16s",
		Doc:    "waits between rounds of charges of a closed group buy; after the last the group fails",
		field:  func(o *options) any { return &o.sf.groupRetries },
		Reload: reloadSchedule(engine.SettleSubscriber)},
	{Name: "issue-retries", Kind: kindWaits, Default: "1m,5m,15m,30m,1h",
		Doc:    "waits between attempts to issue a membership's cards; after the last the order goes to manual review",
		field:  func(o *options) any { return &o.sf.issueRetries },
		Reload: reloadSchedule(engine.IssueSubscriber)},

	// Payments.
	{Name: "sandbox", Kind: kindBool,
		Doc:   "run the built-in sandbox payment provider: callbacks at /v1/payments/sandbox/callback, its gateway at /sandbox/ (customers pay with POST /sandbox/pay)",
		field: func(o *options) any { return &o.pf.sandbox }},
	{Name: "sandbox-secret", Kind: kindString, Secret: true,
		Doc:   "secret of the sandbox's signatures (its callbacks, and requests to its gateway); processes sharing a database share the sandbox and must sign alike (default: the secret kept in the database, which the first process to start brought or drew at random)",
		field: func(o *options) any { return &o.pf.sandboxSecret }},
	{Name: "sandbox-fail-rate", Kind: kindFloat, Range: between("0", "1"),
		Doc:   "share of the sandbox's charges, refunds and closes that fail and do nothing, to watch retries",
		field: func(o *options) any { return &o.pf.sandboxFail }},
	{Name: "sandbox-unknown-rate", Kind: kindFloat, Range: between("0", "1"),
		Doc:   "share of the sandbox's charges, refunds and closes that take effect but lose their answer, to watch query-backs",
		field: func(o *options) any { return &o.pf.sandboxLost }},
	{Name: "hmac-secrets", Kind: kindList, Secret: true,
		Doc:   "comma-separated secrets of the generic HMAC callback scheme, at /v1/payments/hmac/callback (the first signs), each at least " + strconv.Itoa(webhook.MinSecretLen) + " bytes",
		field: func(o *options) any { return &o.pf.hmacSecrets }},
	{Name: "stripe-secrets", Kind: kindList, Secret: true,
		Doc:   "comma-separated Stripe endpoint signing secrets (whsec_…): Stripe webhooks at /v1/payments/stripe/callback",
		field: func(o *options) any { return &o.pf.stripeSecrets }},
	{Name: "stripe-test-mode", Kind: kindBool,
		Doc:   "the Stripe endpoint is a test-mode one: act on test-mode events (livemode false) instead of live ones; without it a test-mode event, which a live Connect endpoint also receives, is acknowledged and pays nothing",
		field: func(o *options) any { return &o.pf.stripeTestMode }},
	{Name: "wechatpay-mchid", Kind: kindString,
		Doc:   "WeChat Pay merchant id: WeChat Pay v3 notifications at /v1/payments/wechatpay/callback",
		field: func(o *options) any { return &o.pf.wechatMchID }},
	{Name: "wechatpay-appid", Kind: kindString,
		Doc:   "WeChat Pay app id the notifications must be for",
		field: func(o *options) any { return &o.pf.wechatAppID }},
	{Name: "wechatpay-apiv3-key", Kind: kindString, Secret: true,
		Doc:   "WeChat Pay APIv3 key (32 bytes), which decrypts notifications",
		field: func(o *options) any { return &o.pf.wechatKey }},
	{Name: "wechatpay-platform-keys", Kind: kindList,
		Doc:   "comma-separated PEM files of WeChat Pay platform certificates or public keys (a public key file as ID=FILE)",
		field: func(o *options) any { return &o.pf.wechatCerts }},
	{Name: "alipay-app-id", Kind: kindString,
		Doc:   "Alipay app_id: Alipay notifications at /v1/payments/alipay/callback",
		field: func(o *options) any { return &o.pf.alipayAppID }},
	{Name: "alipay-seller-id", Kind: kindString,
		Doc:   "Alipay seller_id (2088…) the notifications must be for",
		field: func(o *options) any { return &o.pf.alipaySeller }},
	{Name: "alipay-seller-email", Kind: kindString,
		Doc:   "Alipay seller account (seller_email) that confirms the seller of a notification without a seller_id",
		field: func(o *options) any { return &o.pf.alipayEmail }},
	{Name: "alipay-public-key", Kind: kindString,
		Doc:   "file with Alipay's public key (base64 or PEM)",
		field: func(o *options) any { return &o.pf.alipayKey }},
	{Name: "payment-providers", Kind: kindPairs,
		Doc:   "comma-separated NAME=URL of provider ports speaking Lapse's provider protocol (refunds, queries, closes)",
		field: func(o *options) any { return &o.pf.providers }},
	{Name: "payment-provider-secrets", Kind: kindPairs, Secret: true,
		Doc:   "comma-separated NAME=SECRET that sign the requests to each provider port, each at least " + strconv.Itoa(webhook.MinSecretLen) + " bytes",
		field: func(o *options) any { return &o.pf.providerSecrets }},
	{Name: "payment-merchants", Kind: kindPairs,
		Doc:   "comma-separated NAME=ACCOUNT: the merchant account each provider's payments and group members' charges must be made to",
		field: func(o *options) any { return &o.pf.merchants }},
	{Name: "payment-grace", Kind: kindPairs,
		Doc:   "comma-separated FLOW=DURATION: how long past its deadline an order whose customer started paying in time stays open (checkout: 2m)",
		field: func(o *options) any { return &o.pf.grace }},
}

// The settings of the other commands.
var (
	migrateSettings   = []*setting{dbSetting}
	reconcileSettings = []*setting{dbSetting, flowsSetting}
	flowsSettings     = []*setting{flowsSetting}

	apikeyCreateSettings = []*setting{dbSetting,
		{Name: "name", Kind: kindString, Argument: true,
			Doc:   "what the key is for: the service that calls with it",
			field: func(o *options) any { return &o.args.name }},
		{Name: "scopes", Kind: kindList, Argument: true,
			Doc:   "the scopes of the key, comma-separated: " + strings.Join(access.AllScopes(), ", "),
			field: func(o *options) any { return &o.args.scopes }}}
	operatorAddSettings = []*setting{dbSetting,
		{Name: "name", Kind: kindString, Argument: true,
			Doc:   "the operator's login name",
			field: func(o *options) any { return &o.args.name }},
		{Name: "role", Kind: kindString, Argument: true,
			Doc:   "viewer (reads), operator (everything but keys and operators) or admin",
			field: func(o *options) any { return &o.args.role }}}
	auditListSettings = []*setting{dbSetting,
		{Name: "limit", Kind: kindInt, Argument: true, Default: "50", Range: atLeast("1"),
			Doc:   "rows shown, newest first",
			field: func(o *options) any { return &o.args.limit }},
		{Name: "target", Kind: kindString, Argument: true,
			Doc:   "only the rows about this target (order:A-1, apikey:PREFIX, batch:3)",
			field: func(o *options) any { return &o.args.target }},
		{Name: "actor", Kind: kindString, Argument: true,
			Doc:   "only the rows of this actor's name (an operator, a key's name, an OS user)",
			field: func(o *options) any { return &o.args.actor }}}
	// dbSettings are those of the commands that only read or write the
	// access records.
	dbSettings = []*setting{dbSetting}
	// auditVerifySettings are lapse audit verify's.
	auditVerifySettings = []*setting{dbSetting,
		{Name: "checkpoint", Kind: kindString, Argument: true,
			Doc:   "ROW:HASH, as an earlier audit verify printed it: fail unless the chain still holds that row with that hash (keep each checkpoint outside the database)",
			field: func(o *options) any { return &o.args.checkpoint }}}

	// closeArgs choose what lapse close closes, and say why.
	closeArgs = []*setting{
		{Name: "order", Kind: kindList, Argument: true,
			Doc:   "order numbers to close, comma-separated; may be given again (order numbers after the flags count too)",
			field: func(o *options) any { return &o.args.orders }},
		{Name: "user", Kind: kindString, Argument: true,
			Doc:   "close the orders of this user",
			field: func(o *options) any { return &o.args.user }},
		{Name: "from", Kind: kindString, Argument: true,
			Doc:   "with --to: close the orders created from this time (RFC 3339, inclusive)",
			field: func(o *options) any { return &o.args.from }},
		{Name: "to", Kind: kindString, Argument: true,
			Doc:   "with --from: close the orders created before this time (RFC 3339, exclusive)",
			field: func(o *options) any { return &o.args.to }},
		{Name: "flow", Kind: kindString, Argument: true,
			Doc:   "only the orders of this flow",
			field: func(o *options) any { return &o.args.flow }},
		{Name: "dry-run", Kind: kindBool, Argument: true,
			Doc:   "count what would be closed, show a sample, and change nothing",
			field: func(o *options) any { return &o.args.dryRun }},
		{Name: "reason", Kind: kindString, Argument: true,
			Doc:   "why these orders are closed by hand, kept on every close and in the audit log (required unless --dry-run)",
			field: func(o *options) any { return &o.args.reason }},
	}
	// closeSettings are serve's, so that lapse close builds the engine
	// serve runs (its flows, ledgers, subscribers and payment providers)
	// from the same file, variables and flags, and its arguments.
	closeSettings = append(slices.Clip(serveSettings), closeArgs...)
)

// allSettings returns every setting of every command, each once: the keys
// that a config file may have. Settings of two commands that share a name
// are one setting or agree on its kind and on being an argument.
func allSettings() []*setting {
	var out []*setting
	for _, list := range [][]*setting{serveSettings, migrateSettings, reconcileSettings, flowsSettings, {configSetting},
		apikeyCreateSettings, operatorAddSettings, auditListSettings, dbSettings, auditVerifySettings, closeSettings, benchSettings, demoSettings} {
		for _, s := range list {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}
