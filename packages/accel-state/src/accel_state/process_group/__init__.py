"""The torch process group: started once, timed out by name, ended cleanly; ranks that left."""
