package console

// MaxQueueReviews is how many open reviews the queue reads at once.
const MaxQueueReviews = maxQueueReviews
