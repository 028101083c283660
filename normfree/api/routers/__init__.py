"""One router per resource (candidates, studies, trials, leaderboards, health) plus the pages."""
