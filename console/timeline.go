package console

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// maxAuditRows bounds the audit rows one target contributes to a timeline.
const maxAuditRows = 500

// entry is one line of an order's timeline.
type entry struct {
	At     time.Time
	Kind   string // transition, payment, refund, delivery, attempt, card, member, review, audit
	Title  string
	Fields []field
	Bad    bool // something failed here
}

// field is a labelled value of an entry, both ready to show.
type field struct{ Label, Value string }

// timelineData is everything recorded about an order, read once for the
// timeline and for deciding the page's actions.
type timelineData struct {
	entries    []entry
	reviews    []*lapse.Review
	payments   []*lapse.Payment
	refunds    []*lapse.OrderRefund
	deliveries []engine.DeliveryHistory
	dead       []*lapse.Delivery
}

// timeline reads what is recorded about o and merges it into one timeline,
// oldest first (entries at the same moment in the order the sources are
// read), with times in zone and labels in lang.
func (c *Console) timeline(ctx context.Context, lang string, zone *time.Location, o *lapse.Order, flow *lapse.Flow) (*timelineData, error) {
	e := c.cfg.Engine
	tl := &timelineData{}
	b := entryBuilder{lang: lang, zone: zone}

	ts, err := e.Transitions(ctx, o.OrderNo)
	if err != nil {
		return nil, err
	}
	for _, tr := range ts {
		title := string(tr.FromState) + " → " + string(tr.ToState)
		if tr.FromState == "" {
			title = "→ " + string(tr.ToState)
		}
		b.add(tr.CreatedAt, "transition", title, false,
			"event", string(tr.Event), "fired_by", string(tr.FiredBy), "actor", tr.Actor, "reason", tr.Reason,
			"version", strconv.FormatInt(tr.Version, 10))
	}

	if tl.payments, err = e.Payments(ctx, o.OrderNo); err != nil {
		return nil, err
	}
	for _, p := range tl.payments {
		bad := p.Status == lapse.PaymentReview
		b.add(p.CreatedAt, "payment", t(lang, "tl.payment", p.Status), bad,
			"amount", lapse.Money(p.Amount, p.Currency), "provider", p.Provider, "txn", p.TxnID, "merchant", p.Merchant,
			"reason", p.Reason, "paid_at", when(p.PaidAt, zone), "updated", when(p.UpdatedAt, zone))
		if p.RefundedAt != nil {
			b.add(*p.RefundedAt, "payment", t(lang, "tl.payment_refunded"), false, "txn", p.TxnID, "refund_id", p.RefundID)
		}
	}

	if tl.refunds, err = e.OrderRefunds(ctx, o.OrderNo); err != nil {
		return nil, err
	}
	for _, rf := range tl.refunds {
		b.add(rf.CreatedAt, "refund", t(lang, "tl.refund", lapse.Money(rf.Amount, rf.Currency), rf.Status), rf.Status == lapse.OrderRefundFailed,
			"status", string(rf.Status), "reason", rf.Reason, "key", rf.Key, "refund_id", rf.RefundID, "failure", rf.Failure,
			"provider", rf.Provider, "txn", rf.TxnID, "updated", when(rf.UpdatedAt, zone))
	}

	if tl.deliveries, err = e.Deliveries(ctx, o.OrderNo); err != nil {
		return nil, err
	}
	for _, d := range tl.deliveries {
		if d.Status == lapse.DeliveryDead {
			// One the engine would refuse to revive (a membership's issue
			// delivery, which waits for the order's retry) is not offered.
			switch err := e.Revivable(ctx, d.Delivery); {
			case err == nil:
				tl.dead = append(tl.dead, d.Delivery)
			case lapse.ErrorCode(err) != lapse.ECONFLICT:
				return nil, err
			}
		}
		next := ""
		if d.Status == lapse.DeliveryPending {
			next = when(d.NextAttemptAt, zone)
		}
		if d.Relayed {
			b.add(d.CreatedAt, "delivery", t(lang, "tl.relayed", d.EventType, d.Subscriber), false,
				"subscriber", d.Subscriber, "status", string(d.Status))
			continue
		}
		b.add(d.CreatedAt, "delivery", t(lang, "tl.delivery", d.ID, d.EventType, d.Subscriber), d.Status == lapse.DeliveryDead,
			"subscriber", d.Subscriber, "status", string(d.Status), "attempts", strconv.Itoa(d.Attempts), "next_attempt", next,
			"last_error", d.LastError, "unknown", yes(lang, d.Unknown))
		for _, a := range d.History {
			b.add(a.StartedAt, "attempt", t(lang, "tl.attempt", a.Attempt, d.Subscriber, d.ID), a.Outcome != lapse.OutcomeOK && a.Outcome != lapse.OutcomeApplied,
				"subscriber", d.Subscriber, "attempt", strconv.Itoa(a.Attempt), "outcome", cmp.Or(a.Outcome, t(lang, "tl.running")),
				"error", a.Error, "duration", a.Duration.Round(time.Millisecond).String(), "worker", a.Worker)
		}
	}

	if flow != nil && flow.Issues.On != "" {
		cards, err := e.Cards(ctx, o.OrderNo)
		if err != nil {
			return nil, err
		}
		for _, cd := range cards {
			visits := t(lang, "tl.no_count")
			if cd.Visits > 0 {
				visits = strconv.Itoa(cd.Visits)
			}
			b.add(cd.IssuedAt, "card", t(lang, "tl.card", cd.ID, cd.Product), false,
				"user", cd.UserID, "visits", visits, "used", strconv.Itoa(cd.Used), "status", string(cd.Status))
			if cd.RevokedAt != nil {
				b.add(*cd.RevokedAt, "card", t(lang, "tl.card_voided", cd.ID, cd.Product), false, "deducted", strconv.Itoa(cd.Deducted))
			}
		}
	}

	if flow != nil && flow.Group.Join != "" {
		g, err := e.Group(ctx, o.OrderNo)
		if err != nil {
			return nil, err
		}
		for _, m := range g.Members {
			b.add(m.JoinedAt, "member", t(lang, "tl.member", m.UserID), m.Status == lapse.ChargeFailed,
				"amount", lapse.Money(m.Amount, m.Currency), "provider", m.Provider, "status", string(m.Status),
				"attempts", strconv.Itoa(m.Attempts), "txn", m.TxnID, "last_error", m.LastError, "updated", when(m.UpdatedAt, zone))
			if m.ChargedAt != nil {
				b.add(*m.ChargedAt, "member", t(lang, "tl.charged", m.UserID, lapse.Money(m.Amount, m.Currency)), false, "txn", m.TxnID)
			}
		}
	}

	if tl.reviews, err = e.Reviews(ctx, &lapse.ReviewListParams{OrderID: o.ID}); err != nil {
		return nil, err
	}
	slices.Reverse(tl.reviews) // oldest first, as the timeline reads
	for _, rv := range tl.reviews {
		delivery := ""
		if rv.DeliveryID != 0 {
			delivery = "#" + strconv.FormatInt(rv.DeliveryID, 10)
		}
		b.add(rv.CreatedAt, "review", t(lang, "tl.review", rv.ID), rv.ResolvedAt == nil,
			"reason", rv.Reason, "category", t(lang, "cat."+categorize(tl.failureOf(rv, o, flow))), "delivery", delivery)
		if rv.ResolvedAt != nil {
			b.add(*rv.ResolvedAt, "review", t(lang, "tl.resolved", rv.ID), false)
		}
	}

	if err := c.auditEntries(ctx, &b, o, flow, tl.deliveries); err != nil {
		return nil, err
	}
	tl.entries = b.entries
	slices.SortStableFunc(tl.entries, func(x, y entry) int { return x.At.Compare(y.At) })
	return tl, nil
}

// auditEntries adds the audit rows about o: those whose target is the
// order, its group (a group buy's retry) or one of its deliveries (a
// revival).
func (c *Console) auditEntries(ctx context.Context, b *entryBuilder, o *lapse.Order, flow *lapse.Flow, ds []engine.DeliveryHistory) error {
	as, ok := c.cfg.Store.(lapse.AccessStore)
	if !ok {
		return nil // a store without an audit log has nothing to add
	}
	targets := []string{"order:" + o.OrderNo}
	if flow != nil && flow.Group.Join != "" {
		targets = append(targets, "group:"+o.OrderNo)
	}
	for _, d := range ds {
		targets = append(targets, "delivery:"+strconv.FormatInt(d.ID, 10))
	}
	for _, target := range targets {
		rows, err := as.AuditList(ctx, &lapse.AuditListParams{Target: target, Limit: maxAuditRows})
		if err != nil {
			return err
		}
		for _, a := range rows {
			approval := ""
			if a.ApprovalID != 0 {
				approval = "#" + strconv.FormatInt(a.ApprovalID, 10)
			}
			batch := ""
			if a.Batch != 0 {
				batch = "#" + strconv.FormatInt(a.Batch, 10)
			}
			b.add(a.At, "audit", a.Action+" · "+a.Result, !okResult(a.Result),
				"target", a.Target, "actor", a.ActorKind+":"+a.ActorName, "role", a.Role, "reason", a.Reason,
				"second_factor", a.SecondFactor, "approver", a.Approver, "approval", approval, "batch", batch,
				"params", string(lapse.AuditMaskParams(a.Action, a.Params)), "client", a.ClientAddr)
		}
	}
	return nil
}

// failureOf is what the order's records say of review rv, for its category.
func (tl *timelineData) failureOf(rv *lapse.Review, o *lapse.Order, flow *lapse.Flow) failure {
	f := failure{Reason: rv.Reason, Flow: flow, State: o.State}
	for _, d := range tl.deliveries {
		if d.ID == rv.DeliveryID {
			f.Subscriber, f.Error, f.Unknown = d.Subscriber, d.LastError, d.Unknown
			if n := len(d.History); n > 0 {
				f.Outcome = d.History[n-1].Outcome
			}
		}
	}
	if rv.DeliveryID == 0 {
		for _, p := range tl.payments {
			if p.Status == lapse.PaymentReview && strings.Contains(rv.Reason, "payment "+p.TxnID+" ") {
				f.PaymentStatus, f.PaymentReason = p.Status, p.Reason
			}
		}
	}
	return f
}

// entryBuilder collects entries, labelling their fields in lang and leaving
// out empty ones.
type entryBuilder struct {
	lang    string
	zone    *time.Location
	entries []entry
}

// add adds an entry; kv are field keys (messages "tl.f.<key>") and values.
func (b *entryBuilder) add(at time.Time, kind, title string, bad bool, kv ...string) {
	en := entry{At: at, Kind: kind, Title: title, Bad: bad}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			en.Fields = append(en.Fields, field{Label: t(b.lang, "tl.f."+kv[i]), Value: kv[i+1]})
		}
	}
	b.entries = append(b.entries, en)
}

// yes is true as a word of lang, false as nothing.
func yes(lang string, v bool) string {
	if v {
		return t(lang, "tl.yes")
	}
	return ""
}

func init() {
	m := map[string]msg{
		"tl.kind.transition": {"transition", "状态流转"},
		"tl.kind.payment":    {"payment", "支付"},
		"tl.kind.refund":     {"refund", "退款"},
		"tl.kind.delivery":   {"delivery", "投递"},
		"tl.kind.attempt":    {"attempt", "尝试"},
		"tl.kind.card":       {"card", "卡"},
		"tl.kind.member":     {"member", "团员"},
		"tl.kind.review":     {"review", "复核"},
		"tl.kind.audit":      {"audit", "审计"},

		"tl.payment":          {"Payment %v", "支付 %v"},
		"tl.payment_refunded": {"Payment refunded", "支付已退款"},
		"tl.refund":           {"Refund of %v: %v", "退款 %v：%v"},
		"tl.delivery":         {"Delivery #%v of %v to %v", "投递 #%v（%v → %v）"},
		"tl.relayed":          {"%v relayed to %v", "%v 经中继投递至 %v"},
		"tl.attempt":          {"Attempt %v to %v (delivery #%v)", "第 %v 次尝试 → %v（投递 #%v）"},
		"tl.running":          {"running", "进行中"},
		"tl.card":             {"Card #%v issued: %v", "已发卡 #%v：%v"},
		"tl.card_voided":      {"Card #%v voided: %v", "卡 #%v 已作废：%v"},
		"tl.no_count":         {"not a count card", "非次卡"},
		"tl.member":           {"%v joined", "%v 参团"},
		"tl.charged":          {"%v charged %v", "%v 已扣款 %v"},
		"tl.review":           {"Review #%v opened", "复核 #%v 已创建"},
		"tl.resolved":         {"Review #%v resolved", "复核 #%v 已处理"},
		"tl.yes":              {"yes", "是"},
	}
	for k, v := range map[string]msg{
		"event": {"event", "事件"}, "fired_by": {"fired by", "触发方式"}, "actor": {"actor", "操作者"}, "reason": {"reason", "原因"},
		"version": {"version", "版本"}, "amount": {"amount", "金额"}, "provider": {"provider", "支付渠道"}, "txn": {"transaction", "交易号"},
		"merchant": {"merchant", "商户"}, "paid_at": {"paid at", "支付时间"}, "updated": {"updated", "更新时间"},
		"refund_id": {"provider's refund id", "渠道退款单号"}, "status": {"status", "状态"}, "key": {"idempotency key", "幂等键"},
		"failure": {"failure", "失败原因"}, "subscriber": {"subscriber", "订阅方"}, "attempts": {"attempts", "尝试次数"},
		"next_attempt": {"next attempt", "下次尝试"}, "last_error": {"last error", "最近错误"}, "unknown": {"outcome unknown", "结果未知"},
		"attempt": {"attempt", "第几次"}, "outcome": {"outcome", "结果"}, "error": {"error", "错误"}, "duration": {"duration", "耗时"},
		"worker": {"worker", "执行节点"}, "user": {"user", "用户"}, "visits": {"visits", "次数"}, "used": {"used", "已用"},
		"deducted": {"visits deducted", "扣回次数"}, "category": {"category", "类别"}, "delivery": {"delivery", "投递"},
		"target": {"target", "对象"}, "role": {"role", "角色"}, "second_factor": {"second factor", "二次验证"},
		"approver": {"approver", "审批人"}, "approval": {"approval", "审批单"}, "batch": {"batch", "批次"},
		"params": {"parameters", "参数"}, "client": {"client address", "客户端地址"},
	} {
		m["tl.f."+k] = v
	}
	addMessages(m)
}
