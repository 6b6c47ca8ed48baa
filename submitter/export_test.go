package submitter

// BacklogCountsStarted and BacklogCountsAnswered tell a test how many
// backlog counts have been sent and which has answered, so it can wait for
// a count that saw what it did.
func BacklogCountsStarted(s *Server) uint64 {
	started, _ := s.app.BacklogCounts()
	return started
}

func BacklogCountsAnswered(s *Server) uint64 {
	_, answered := s.app.BacklogCounts()
	return answered
}
