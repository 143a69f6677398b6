//! Budgets (BUD-1). Admin: `GET /api/budgets` (every policy with its usage now),
//! `GET /api/prices`, `PUT/DELETE /api/prices/{model}`. Anyone signed in: `GET /api/me/quota`
//! (the policies that apply to them: workspace, their own, their keys'). `POST /api/budgets`,
//! `PATCH/DELETE /api/budgets/{id}`: admins on any subject, a key's owner on their own key
//! (`subject: "apikey"`).
//!
//! Subjects are `apikey`, `member` and `ws`; the seed's `dept` is not supported (SubLane has no
//! departments). Limits of `credits` may have decimals and are priced by `GET /api/prices`.

use app::model::{BudgetPatch, BudgetView, NewBudget, PriceInput, PriceView};
use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    routing::{get, patch, put},
};

use crate::{
    api::{ApiJson, ApiPath},
    app_state::AppState,
    auth::extract::{Admin, SignedIn},
    budgets::manage,
    error::Result,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/budgets", get(list).post(create))
        .route("/budgets/{id}", patch(update).delete(remove))
        .route("/me/quota", get(mine))
        .route("/prices", get(prices))
        .route("/prices/{model}", put(set_price).delete(delete_price))
}

async fn list(Admin(me): Admin, State(s): State<AppState>) -> Result<Json<Vec<BudgetView>>> {
    Ok(Json(manage::list(&s, &me).await?))
}

async fn mine(SignedIn(me): SignedIn, State(s): State<AppState>) -> Result<Json<Vec<BudgetView>>> {
    Ok(Json(manage::mine(&s, &me).await?))
}

async fn create(
    SignedIn(me): SignedIn,
    State(s): State<AppState>,
    ApiJson(new): ApiJson<NewBudget>,
) -> Result<(StatusCode, Json<BudgetView>)> {
    Ok((StatusCode::CREATED, Json(manage::create(&s, &me, new).await?)))
}

async fn update(
    SignedIn(me): SignedIn,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(patch): ApiJson<BudgetPatch>,
) -> Result<Json<BudgetView>> {
    Ok(Json(manage::update(&s, &me, id, patch).await?))
}

async fn remove(
    SignedIn(me): SignedIn,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<StatusCode> {
    manage::delete(&s, &me, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn prices(Admin(me): Admin, State(s): State<AppState>) -> Result<Json<Vec<PriceView>>> {
    Ok(Json(manage::prices(&s, &me).await?))
}

async fn set_price(
    Admin(me): Admin,
    State(s): State<AppState>,
    ApiPath(model): ApiPath<String>,
    ApiJson(input): ApiJson<PriceInput>,
) -> Result<Json<Vec<PriceView>>> {
    Ok(Json(manage::set_price(&s, &me, &model, input).await?))
}

async fn delete_price(
    Admin(me): Admin,
    State(s): State<AppState>,
    ApiPath(model): ApiPath<String>,
) -> Result<Json<Vec<PriceView>>> {
    Ok(Json(manage::delete_price(&s, &me, &model).await?))
}
