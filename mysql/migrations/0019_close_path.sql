-- The close path checks nothing it does not need to: the log, the outbox
-- and the deliveries are written only in the statements that write or move
-- their order (or event), which name the row they read. A foreign key would
-- only repeat that lookup and take a shared lock on the order's row.
ALTER TABLE transitions DROP FOREIGN KEY transitions_order_fk;
ALTER TABLE outbox DROP FOREIGN KEY outbox_order_fk;
ALTER TABLE deliveries DROP FOREIGN KEY deliveries_event_fk;
