#include "prefetch/cancel.h"

namespace epochfs::prefetch {
namespace {

thread_local const Cancel* t_cancel = nullptr;

}  // namespace

Cancel::Scope::Scope(const Cancel* cancel) : outer_(t_cancel) { t_cancel = cancel; }

Cancel::Scope::~Scope() { t_cancel = outer_; }

const Cancel* Cancel::current() { return t_cancel; }

}  // namespace epochfs::prefetch
