// ErrorFeedback is public (callers own it): include/terse/error_feedback.h. This path keeps the
// layers' includes of it as they were.
#pragma once

#include <terse/error_feedback.h>
