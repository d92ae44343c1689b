//! How a statement reaches PostgreSQL: typed here, sent unnamed, and counted.
//!
//! tokio-postgres's `query(&str, …)` first prepares a *named* statement to learn its
//! parameters' types (one round trip), then runs it (a second). A named statement is state
//! of the server session, which a pooler in transaction mode (PgBouncer before 1.21) hands
//! to other clients between statements: behind one, statements fail with `prepared
//! statement "s19" does not exist`. So every statement here says its parameters' types
//! itself ([`Param`], the [`params!`] macro) and goes out as the unnamed statement of one
//! Parse/Bind/Execute/Sync exchange (`query_typed`): one round trip, no session state.
//!
//! Each round trip is counted under the name of the map operation that made it
//! ([`RoundTrips`]; `imgcas_maps_statements_total{op}`), so that what a request costs the
//! database can be read off `/metrics` and held to a budget by the tests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use super::super::MapError;
use super::store_error;

/// A value bound to a statement, and the PostgreSQL type it is sent as (the type the
/// server would infer for its place, so the statement plans as if it had been prepared).
pub(super) trait Param: ToSql + Sync {
    const TYPE: Type;
}

macro_rules! param_types {
    ($($rust:ty => $pg:ident),* $(,)?) => {
        $(impl Param for $rust {
            const TYPE: Type = Type::$pg;
        })*
    };
}

param_types! {
    bool => BOOL,
    i16 => INT2,
    i32 => INT4,
    i64 => INT8,
    f64 => FLOAT8,
    String => TEXT,
    &str => TEXT,
    Vec<u8> => BYTEA,
    &[u8] => BYTEA,
    Vec<Vec<u8>> => BYTEA_ARRAY,
    Vec<i16> => INT2_ARRAY,
    Vec<i32> => INT4_ARRAY,
    Vec<i64> => INT8_ARRAY,
    Vec<String> => TEXT_ARRAY,
}

impl<T: Param> Param for Option<T> {
    const TYPE: Type = T::TYPE;
}

impl Param for &String {
    const TYPE: Type = Type::TEXT;
}

impl Param for &Vec<u8> {
    const TYPE: Type = Type::BYTEA;
}

/// A statement the maps send, and the map operation its round trips are counted under.
pub(super) struct Statement {
    pub(super) op: &'static str,
    pub(super) sql: &'static str,
}

/// A statement's parameters with their types.
pub(super) type Params<'a> = &'a [(&'a (dyn ToSql + Sync), Type)];

/// One parameter with its type ([`params!`]).
pub(super) fn typed<T: Param>(value: &T) -> (&(dyn ToSql + Sync), Type) {
    (value, T::TYPE)
}

/// `params![a, b, …]`: a statement's parameters, each sent as its Rust type's PostgreSQL
/// type ([`Param`]).
macro_rules! params {
    ($($value:expr),* $(,)?) => {
        &[$($crate::maps::postgres::sql::typed(&$value)),*]
    };
}
pub(super) use params;

/// Round trips to the database by map operation, since the process started.
#[derive(Default, Clone)]
pub(super) struct RoundTrips {
    by_op: Arc<Mutex<BTreeMap<&'static str, u64>>>,
}

impl RoundTrips {
    pub(super) fn count(&self, op: &'static str, n: u64) {
        if let Ok(mut by_op) = self.by_op.lock() {
            *by_op.entry(op).or_default() += n;
        }
    }

    pub(super) fn read(&self) -> Vec<(&'static str, u64)> {
        self.by_op
            .lock()
            .map(|by_op| by_op.iter().map(|(op, n)| (*op, *n)).collect())
            .unwrap_or_default()
    }
}

/// A pooled connection lent to one map operation: every statement it runs is one round
/// trip, counted under the operation's name.
pub(super) struct Session {
    pub(super) client: deadpool_postgres::Client,
    pub(super) op: &'static str,
    pub(super) trips: RoundTrips,
}

/// A transaction of a [`Session`] (`BEGIN` and `COMMIT` are a round trip each).
pub(super) struct Txn<'a> {
    txn: deadpool_postgres::Transaction<'a>,
    op: &'static str,
    trips: RoundTrips,
}

/// What runs statements: a session, or a transaction of one.
#[async_trait::async_trait]
pub(super) trait Run: Sync {
    async fn query(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, MapError>;
    async fn execute(&self, sql: &str, params: Params<'_>) -> Result<u64, MapError>;
}

#[async_trait::async_trait]
impl Run for Session {
    async fn query(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, MapError> {
        let mut tries = 0;
        loop {
            self.trips.count(self.op, 1);
            match self.client.query_typed(sql, params).await {
                Err(e) if contended(&e) && tries < CONTENDED_TRIES => tries += 1,
                answer => return answer.map_err(store_error),
            }
            contended_pause(tries).await;
        }
    }

    async fn execute(&self, sql: &str, params: Params<'_>) -> Result<u64, MapError> {
        let mut tries = 0;
        loop {
            self.trips.count(self.op, 1);
            match self.client.execute_typed(sql, params).await {
                Err(e) if contended(&e) && tries < CONTENDED_TRIES => tries += 1,
                answer => return answer.map_err(store_error),
            }
            contended_pause(tries).await;
        }
    }
}

/// Times a statement outside a transaction is run again after the server chose it as a
/// deadlock's victim (or found it could not be serialized).
const CONTENDED_TRIES: u32 = 4;

/// Whether the server rolled the statement back because it ran into another one: a
/// deadlock, or a serialization failure. Such a statement did nothing, and the server's own
/// advice is to run it again. (The counters' triggers of migration 13 lock rows of
/// `imgcas_totals` chosen by the row they count, so two writes of URLs, or of variants, can
/// wait on each other in opposite orders.)
pub(super) fn contended(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|code| {
        *code == SqlState::T_R_DEADLOCK_DETECTED || *code == SqlState::T_R_SERIALIZATION_FAILURE
    })
}

/// A short pause, longer on each try and spread so that the two sides of a deadlock do not
/// meet again at once.
pub(super) async fn contended_pause(tries: u32) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    let ms = 5 * u64::from(tries) + nanos % 10;
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
}

#[async_trait::async_trait]
impl Run for Txn<'_> {
    async fn query(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, MapError> {
        self.trips.count(self.op, 1);
        self.txn.query_typed(sql, params).await.map_err(store_error)
    }

    async fn execute(&self, sql: &str, params: Params<'_>) -> Result<u64, MapError> {
        self.trips.count(self.op, 1);
        self.txn
            .execute_typed(sql, params)
            .await
            .map_err(store_error)
    }
}

impl Session {
    /// Starts a transaction (one round trip).
    pub(super) async fn begin(&mut self) -> Result<Txn<'_>, MapError> {
        self.trips.count(self.op, 1);
        let txn = self.client.transaction().await.map_err(store_error)?;
        Ok(Txn {
            txn,
            op: self.op,
            trips: self.trips.clone(),
        })
    }
}

impl Session {
    /// Runs statements as one simple query (no parameters; one round trip).
    pub(super) async fn batch(&self, sql: &str) -> Result<(), tokio_postgres::Error> {
        self.trips.count(self.op, 1);
        self.client.batch_execute(sql).await
    }
}

impl Txn<'_> {
    /// Runs statements as one simple query (no parameters; one round trip).
    pub(super) async fn batch(&self, sql: &str) -> Result<(), MapError> {
        self.trips.count(self.op, 1);
        self.txn.batch_execute(sql).await.map_err(store_error)
    }

    /// Commits (one round trip).
    pub(super) async fn commit(self) -> Result<(), MapError> {
        self.trips.count(self.op, 1);
        self.txn.commit().await.map_err(store_error)
    }
}
