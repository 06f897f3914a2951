package nats

// CreateStream is createStream, for the tests that set up a stream of
// their own before the sink's: they meet the server's store race too.
var CreateStream = createStream
