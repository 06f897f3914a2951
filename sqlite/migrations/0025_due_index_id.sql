-- The due index in the claim's (deadline, id) order: a claim reads on from
-- the deadline and id of the last order claimed before it, and orders that
-- share one deadline (a flash sale) come back by id straight from the
-- index. With flow between the two, ordering a run of equal deadlines by id
-- took a sort of the whole run at every claim. flow still rides along, so
-- that the next-deadline query and the claim's flow filter read the index
-- alone.
DROP INDEX orders_due_idx;
CREATE INDEX orders_due_idx ON orders (deadline_at, id, flow) WHERE deadline_at IS NOT NULL;
