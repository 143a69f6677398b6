//! The embedded SQLite database (OPS-2): connection pool in WAL mode, embedded migrations, and
//! the single-process lock (OPS-1).

use std::{fs::File, path::PathBuf, str::FromStr, time::Duration};

use sqlx::{
    SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("invalid database URL {url}: {source}")]
    Url { url: String, source: sqlx::Error },
    #[error(
        "another SubLane process is already using the database {db} (lock {lock} is held). \
         Only one process may serve a database (OPS-1): stop the other one first."
    )]
    Locked { db: String, lock: String },
    #[error("cannot create or lock {path}: {source}")]
    LockFile { path: String, source: std::io::Error },
    #[error("cannot open the database: {0}")]
    Open(sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(sqlx::migrate::MigrateError),
}

/// Holds the exclusive lock on a database for as long as it lives.
#[derive(Debug)]
pub struct ProcessLock {
    _file: Option<File>,
}

/// Splits `rows` for multi-row statements: chunks of `most` rows (a power of two), then the rest
/// in powers of two, largest first. A batch of any length then takes one of a few statement
/// shapes (eight for 128), each parsed once and kept in the connection's statement cache. A rest
/// of any length as one chunk was a statement of a new shape nearly every batch, parsed afresh:
/// under callgrind, about 850k instructions for one of 128 rows of 18 parameters. The price is
/// a few more statements per batch (at most six more for 128).
pub fn statement_sized<T>(mut rows: &[T], most: usize) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        let n = rows.len().min(most);
        if n == 0 {
            return None;
        }
        let (chunk, rest) = rows.split_at(1 << n.ilog2());
        rows = rest;
        Some(chunk)
    })
}

/// Opens (creating if needed) and migrates the database, after taking its process lock.
pub async fn open(url: &str) -> Result<(SqlitePool, ProcessLock), DbError> {
    let options = SqliteConnectOptions::from_str(url)
        .map_err(|source| DbError::Url { url: url.to_owned(), source })?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(5));
    let lock = lock(options.get_filename().to_path_buf())?;
    let pool =
        SqlitePoolOptions::new().max_connections(8).connect_with(options).await.map_err(DbError::Open)?;
    MIGRATOR.run(&pool).await.map_err(DbError::Migrate)?;
    Ok((pool, lock))
}

/// Takes an exclusive advisory lock on `<db file>.lock`. In-memory databases need none.
fn lock(db_file: PathBuf) -> Result<ProcessLock, DbError> {
    let name = db_file.to_string_lossy();
    if name.is_empty() || name == ":memory:" {
        return Ok(ProcessLock { _file: None });
    }
    let mut lock_path = db_file.clone().into_os_string();
    lock_path.push(".lock");
    let lock_path = PathBuf::from(lock_path);
    let err = |source| DbError::LockFile { path: lock_path.display().to_string(), source };
    if let Some(dir) = lock_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let file =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(err)?;
    match file.try_lock() {
        Ok(()) => Ok(ProcessLock { _file: Some(file) }),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(DbError::Locked { db: db_file.display().to_string(), lock: lock_path.display().to_string() })
        }
        Err(std::fs::TryLockError::Error(e)) => Err(err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn second_open_of_the_same_database_is_refused_until_the_first_closes() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let (pool, lock) = open(&url).await.unwrap();
        let err = open(&url).await.unwrap_err();
        assert!(matches!(err, DbError::Locked { .. }), "{err}");
        assert!(err.to_string().contains("another SubLane process"));
        pool.close().await;
        drop(lock);
        let (_pool, _lock) = open(&url).await.unwrap();
    }

    #[tokio::test]
    async fn rebuilding_the_records_table_keeps_rows_and_never_reuses_an_id() {
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap();
        sqlx::raw_sql(include_str!("../../migrations/0002_request_records.sql"))
            .execute(&pool)
            .await
            .unwrap();
        let insert = "INSERT INTO request_records (request_id, member_id, model, operation, started_at_ms,
                duration_ms, outcome) VALUES (?, 7, 'm', 'responses', 1, 2, 'success')";
        for id in ["req_a", "req_b", "req_c"] {
            sqlx::query(insert).bind(id).execute(&pool).await.unwrap();
        }
        // The newest row pruned: the table's highest id (2) is below the ids handed out (3).
        sqlx::query("DELETE FROM request_records WHERE id = 3").execute(&pool).await.unwrap();
        sqlx::raw_sql(include_str!("../../migrations/0011_request_records_one_index.sql"))
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query(insert).bind("req_d").execute(&pool).await.unwrap();
        let rows: Vec<(i64, String, i64)> =
            sqlx::query_as("SELECT id, request_id, member_id FROM request_records ORDER BY id")
                .fetch_all(&pool)
                .await
                .unwrap();
        assert_eq!(
            rows,
            [(1, "req_a".into(), 7), (2, "req_b".into(), 7), (4, "req_d".into(), 7)],
            "rows kept, and id 3 not handed out again"
        );
        let indexes: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'request_records'",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(indexes, ["request_records_by_member"]);
    }

    #[tokio::test]
    async fn database_runs_in_wal_mode_with_foreign_keys() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let (pool, _lock) = open(&url).await.unwrap();
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&pool).await.unwrap();
        assert_eq!(mode, "wal");
        let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys").fetch_one(&pool).await.unwrap();
        assert_eq!(fk, 1);
    }
}
