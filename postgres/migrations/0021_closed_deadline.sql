-- The deadline an order had when it ended (lapse.Order.ClosedDeadlineAt):
-- deadline_at is cleared on entering a terminal state, since nothing is due
-- any more, and without this nobody could see which deadline a TIMEOUT
-- fired at. A nullable column with no default rewrites nothing.
ALTER TABLE orders ADD COLUMN closed_deadline_at timestamptz;
