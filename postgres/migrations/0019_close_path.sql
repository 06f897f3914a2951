-- The close path made cheap: a close changes no indexed column of orders,
-- so its update is HOT (no index entry written, the new row version in the
-- same page), and the append-only log and outbox rows are checked against
-- nothing.
--
-- The durable timer moves to a narrow table of its own: one row per order
-- that waits on a deadline, deleted when the order leaves the deadline
-- behind. orders.deadline_at stays the truth; every statement that changes
-- it writes order_deadlines in the same statement, after the orders row (so
-- every writer locks the order first, then its deadline row).
CREATE TABLE order_deadlines (
	order_id    bigint      PRIMARY KEY,
	deadline_at timestamptz NOT NULL,
	flow        text        NOT NULL
);
INSERT INTO order_deadlines (order_id, deadline_at, flow)
SELECT id, deadline_at, flow FROM orders WHERE deadline_at IS NOT NULL;
-- Ordered by (deadline_at, order_id), the deadline list's keyset order; flow
-- rides along so that the next-deadline query is an index-only scan.
CREATE INDEX order_deadlines_due_idx ON order_deadlines (deadline_at, order_id) INCLUDE (flow);
DROP INDEX orders_due_idx;

-- An index on state would make every state change a non-HOT update. Orders
-- are listed by state through the newest-first index, filtered.
DROP INDEX orders_state_idx;

-- Room in each page for the next version of every row on it, which HOT
-- needs: a batch of closes often takes every order of a page (orders made
-- together come due together, as in a flash sale), and a batch cannot reuse
-- the room its own old versions leave until it commits. At 80 a batch of
-- such closes was a quarter HOT; at 50, all of it. It applies to pages
-- written from now on; VACUUM FULL orders (or pg_repack) rewrites the old.
ALTER TABLE orders SET (fillfactor = 50);

-- The log, the outbox and the deliveries are written only in the statement
-- that writes or moves their order (or event), which names the row it read:
-- a foreign key would only repeat that lookup, and lock the order row.
ALTER TABLE transitions DROP CONSTRAINT transitions_order_id_fkey;
ALTER TABLE outbox DROP CONSTRAINT outbox_order_id_fkey;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_event_id_fkey;

-- One index per log row and two per event, instead of two and three: rows
-- are read by order, so the primary key leads with it.
ALTER TABLE transitions DROP CONSTRAINT transitions_pkey;
DROP INDEX transitions_order_idx;
ALTER TABLE transitions ADD PRIMARY KEY (order_id, id);
ALTER TABLE outbox DROP CONSTRAINT outbox_pkey;
DROP INDEX outbox_order_idx;
ALTER TABLE outbox ADD PRIMARY KEY (order_id, seq);
