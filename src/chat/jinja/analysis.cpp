#include "chat/jinja/analysis.h"

#include "chat/jinja/error.h"

namespace kvasir::jinja {

namespace {

bool expr_uses_name(const Expr* e, std::string_view name) {
  if (!e) return false;
  if (e->kind == ExprKind::kName && e->name == name) return true;
  if (expr_uses_name(e->a.get(), name) || expr_uses_name(e->b.get(), name) || expr_uses_name(e->c.get(), name) ||
      expr_uses_name(e->dyn_args.get(), name) || expr_uses_name(e->dyn_kwargs.get(), name)) {
    return true;
  }
  for (const auto& x : e->items) if (expr_uses_name(x.get(), name)) return true;
  for (const auto& kv : e->kwargs) if (expr_uses_name(kv.second.get(), name)) return true;
  for (const auto& c : e->comparisons) if (expr_uses_name(c.second.get(), name)) return true;
  return false;
}

bool uses_name(const Body& body, std::string_view name) {
  for (const auto& s : body) {
    if (expr_uses_name(s->expr.get(), name) || expr_uses_name(s->cond.get(), name) ||
        expr_uses_name(s->filter.get(), name) || uses_name(s->body, name) || uses_name(s->else_body, name)) {
      return true;
    }
    for (const auto& [cond, b] : s->branches) {
      if (expr_uses_name(cond.get(), name) || uses_name(b, name)) return true;
    }
    for (const auto& d : s->defaults) if (expr_uses_name(d.get(), name)) return true;
    for (const auto& v : s->values) if (expr_uses_name(v.get(), name)) return true;
  }
  return false;
}

// Jinja2 rejects an unknown filter or test when it compiles the template, except inside an `if`
// statement or an inline if-expression of the same scope, where the error waits until it runs.
void check_expr(const Expr* e, bool soft) {
  if (!e) return;
  if (e->kind == ExprKind::kCondExpr) soft = true;
  if (!soft && e->kind == ExprKind::kFilter && !e->filter) {
    throw JinjaError{"TemplateAssertionError", "No filter named '" + e->name + "'.", e->line, e->column};
  }
  if (!soft && e->kind == ExprKind::kTest && !e->test) {
    throw JinjaError{"TemplateAssertionError", "No test named '" + e->name + "'.", e->line, e->column};
  }
  for (const Expr* x : {e->a.get(), e->b.get(), e->c.get(), e->dyn_args.get(), e->dyn_kwargs.get()}) check_expr(x, soft);
  for (const auto& x : e->items) check_expr(x.get(), soft);
  for (const auto& kv : e->kwargs) check_expr(kv.second.get(), soft);
  for (const auto& c : e->comparisons) check_expr(c.second.get(), soft);
}

void check_names(const Body& body, bool soft) {
  for (const auto& s : body) {
    switch (s->kind) {
      case StmtKind::kIf:
        for (const auto& [cond, b] : s->branches) {
          check_expr(cond.get(), true);
          check_names(b, true);
        }
        check_names(s->else_body, true);
        break;
      case StmtKind::kFor:
        check_expr(s->expr.get(), soft);
        check_expr(s->cond.get(), false);
        check_names(s->body, false);
        check_names(s->else_body, false);
        break;
      case StmtKind::kMacro:
      case StmtKind::kCallBlock:
        for (const auto& d : s->defaults) check_expr(d.get(), false);
        check_expr(s->expr.get(), soft);
        check_names(s->body, false);
        break;
      case StmtKind::kSetBlock:
      case StmtKind::kFilterBlock:
        check_expr(s->filter.get(), false);
        check_names(s->body, false);
        break;
      case StmtKind::kWith:
        for (const auto& v : s->values) check_expr(v.get(), soft);
        check_names(s->body, false);
        break;
      case StmtKind::kBody:
        check_names(s->body, soft);
        break;
      default:
        check_expr(s->expr.get(), soft);
        break;
    }
  }
}

}  // namespace

bool body_uses_name(const Body& body, std::string_view name) { return uses_name(body, name); }

void check_filter_and_test_names(const Body& body) { check_names(body, false); }

}  // namespace kvasir::jinja
