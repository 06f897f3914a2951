package http

import "github.com/lapsehq/lapse/engine"

// Routes returns the server's route table as "METHOD /path" strings, for the
// OpenAPI completeness test.
func (s *Server) Routes() []string {
	var out []string
	for _, rt := range s.routes() {
		out = append(out, rt.method+" "+rt.path)
	}
	return out
}

// RouteAccess is who may call a route, as the route table says.
type RouteAccess struct {
	Scope   string // "": open to anyone, unless Session
	Session bool   // needs an operator's session and no scope
	Risky   bool   // an operator needs a fresh second factor
	Stake   bool   // an operator's call above a threshold answers 202 with an approval request
	Audit   string // the action its calls are in the audit log as; "": a read
}

// Access maps each route, as "METHOD /path", to its RouteAccess, so that
// the OpenAPI test can check the document's security against it, and the
// access tests can call every route.
func (s *Server) Access() map[string]RouteAccess {
	out := map[string]RouteAccess{}
	for _, rt := range s.routes() {
		out[rt.method+" "+rt.path] = RouteAccess{Scope: rt.scope, Session: rt.session, Risky: rt.risky, Stake: rt.stake != nil, Audit: rt.audit}
	}
	return out
}

// RequestBodies maps the OpenAPI schema name of each request body to the Go
// type the server decodes it into, so that the test can compare their fields.
var RequestBodies = map[string]any{
	"OrderCreate":    orderCreateRequest{},
	"FireRequest":    fireRequest{},
	"DeadlineChange": deadlineRequest{},
	"StockSet":       stockRequest{},
	"CouponCreate":   couponRequest{},
	"PaymentIntent":  intentRequest{},
	"RefundRequest":  refundRequest{},
	"GroupCreate":    groupCreateRequest{},
	"JoinRequest":    joinRequest{},
	"RetryRequest":   retryRequest{},
	"TriggerRequest": triggerRequest{},
	"Login":          loginRequest{},
	"SecondFactor":   secondFactorRequest{},
	"Decision":       decisionRequest{},
	"CloseRequest":   closeRequest{},
	"ResolveRequest": resolveRequest{},
}

// ResponseBodies maps the OpenAPI schema name of each response view to its
// Go type.
var ResponseBodies = map[string]any{
	"Stock":           stockView{},
	"Coupon":          couponView{},
	"Delivery":        deliveryView{},
	"DeliveryAttempt": attemptView{},
	"Group":           groupView{},
	"Session":         sessionJSON{},
	"Approval":        approvalJSON{},
	"ApprovalRequest": ApprovalRequest{},
	"AuditEntry":      auditJSON{},
	"CloseBatch":      batchJSON{},
	"Probe":           probeView{},
	"ReviewList":      reviewPage{},
	"ProbeRun":        engine.ProbeRun{},
	"ProbeStep":       engine.ProbeStep{},
}

// CloseBodyBytes is the body limit of the manual close's routes.
const CloseBodyBytes = closeBodyBytes
