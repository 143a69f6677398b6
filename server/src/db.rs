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
