"""What every reconcile pass shares, whatever the kind: the working status and its
merge patch (``status_pass``), one way to report errors (``problems``)."""
