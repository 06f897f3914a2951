-- An applied payment costs the database less: payments lose their foreign
-- key to orders, as the log and the outbox did in 0019. A payment names the
-- order the engine read before it records the payment, or, applied, the
-- order that its own statement moves under the row's lock; orders are never
-- deleted. The key made every payment row a trigger query of its own: a
-- lookup of its order and a KEY SHARE lock on it, at the end of the
-- statement that had just updated that order. Without it a signed callback
-- cost the database about 6 µs less (http BenchmarkCallback, 2026-12-04,
-- three interleaved pairs: 98–101 against 105–107 µs).
ALTER TABLE payments DROP CONSTRAINT payments_order_id_fkey;
