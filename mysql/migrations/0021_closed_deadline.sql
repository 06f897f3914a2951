-- The deadline an order had when it ended (lapse.Order.ClosedDeadlineAt):
-- deadline_at is cleared on entering a terminal state, since nothing is due
-- any more, and without this nobody could see which deadline a TIMEOUT
-- fired at. A nullable column without a default, which MariaDB ≥ 10.3 and
-- MySQL 8 add without copying the table.
ALTER TABLE orders ADD COLUMN closed_deadline_at BIGINT NULL;
