package rabbitmq

// SetMaxIdleChannels changes how many idle channels s keeps per connection;
// 0 makes every Deliver open and close its own.
func SetMaxIdleChannels(s *Sink, n int) { s.maxIdle = n }
