package redis

// Member is member, for the tests of package redis_test.
var Member = member

// FailoverOptions is failoverOptions, for the tests of Sentinel URLs.
var FailoverOptions = failoverOptions

// ServerVersion and AtLeast are serverVersion and atLeast, for the tests
// of CheckVersion's reading.
var (
	ServerVersion = serverVersion
	AtLeast       = atLeast
)
