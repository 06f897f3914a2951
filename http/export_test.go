package http

// Routes returns the server's route table as "METHOD /path" strings, for the
// OpenAPI completeness test.
func (s *Server) Routes() []string {
	var out []string
	for _, rt := range s.routes() {
		out = append(out, rt.method+" "+rt.path)
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
}

// ResponseBodies maps the OpenAPI schema name of each response view to its
// Go type.
var ResponseBodies = map[string]any{
	"Stock":           stockView{},
	"Coupon":          couponView{},
	"Delivery":        deliveryView{},
	"DeliveryAttempt": attemptView{},
	"Group":           groupView{},
}
